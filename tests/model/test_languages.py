"""model.text.languages: what users send for source_lang / target_lang → a model's own language codes."""

import ast
from pathlib import Path

import pytest
from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M_CODES
from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES as MBART50
from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB

from model.text import languages
from model.text.languages import LanguageIndex, UnsupportedLanguage, iso_code, language_index, match_language

M2M100 = M2M_CODES["m2m100"]
FAMILIES = {"nllb": NLLB, "mbart50": MBART50, "m2m100": M2M100}
# Real OPUS-MT / Tatoeba-MT target tokens (their >>xx<< insides).
MARIAN_ZHO = ["cmn_Hans", "cmn_Hant", "cmn", "yue_Hant", "yue_Hans", "nan", "wuu"]  # eng-zho
MARIAN_ROMANCE = ["fr", "es", "it", "pt", "pt_br", "ro", "ca", "gl", "pt_BR", "la", "fr_CA", "es_ES", "es_MX",
                  "es_AR", "pt_PT", "fr_FR", "it_IT"]  # en-ROMANCE (part)
MARIAN_PT = ["pob", "por"]  # tc-big-en-pt: pob is Brazilian Portuguese
MARIAN_MUL = ["fra", "deu", "por", "spa", "zho_Hans", "zho_Hant", "cmn_Hans", "srp_Cyrl", "srp_Latn", "nob", "nno"]
# Found by test_iso_codes_map_back: a language NLLB serves in two scripts, none of them the language's usual one.
NLLB_AMBIGUOUS = {"ace": {"ace_Arab", "ace_Latn"}, "bjn": {"bjn_Arab", "bjn_Latn"}, "ks": {"kas_Arab", "kas_Deva"},
                  "kr": {"knc_Arab", "knc_Latn"}, "taq": {"taq_Latn", "taq_Tfng"}, "zh": {"zho_Hans", "zho_Hant"}}


def match(requested, codes, field="target_lang"):
    return match_language(requested, codes, field)


def rejection(requested, codes, field="target_lang") -> UnsupportedLanguage:
    with pytest.raises(UnsupportedLanguage) as info:
        match_language(requested, codes, field)
    return info.value


@pytest.mark.parametrize("codes, requested, expected", [
    # the model's own code, its token form, any case
    (NLLB, "fra_Latn", "fra_Latn"), (NLLB, "Fra_Latn", "fra_Latn"), (NLLB, "FRA-LATN", "fra_Latn"),
    (MBART50, "fr_XX", "fr_XX"), (M2M100, "fr", "fr"), (M2M100, "FR", "fr"), (MARIAN_MUL, "fra", "fra"),
    (MARIAN_MUL, ">>fra<<", "fra"), (M2M100, "__fr__", "fr"), (NLLB, ">>fra<<", "fra_Latn"),
    # ISO 639-1, 639-3, 639-2/B, BCP 47 with region
    (NLLB, "fr", "fra_Latn"), (NLLB, "FR", "fra_Latn"), (NLLB, "fre", "fra_Latn"), (NLLB, "fr-FR", "fra_Latn"),
    (MBART50, "fr", "fr_XX"), (MBART50, "fra", "fr_XX"), (MBART50, "fre", "fr_XX"), (MBART50, "fr-CA", "fr_XX"),
    (M2M100, "fra", "fr"), (M2M100, "fr-FR", "fr"), (MARIAN_MUL, "fr", "fra"), (MARIAN_MUL, "fre", "fra"),
    (MARIAN_MUL, "de-AT", "deu"), (MARIAN_MUL, "ger", "deu"), (NLLB, "iw", "heb_Hebr"), (NLLB, "mo", "ron_Latn"),
    # macrolanguages, both ways
    (NLLB, "ar", "arb_Arab"), (NLLB, "ara", "arb_Arab"), (NLLB, "ar-EG", "arb_Arab"), (M2M100, "arb", "ar"),
    (MBART50, "arb", "ar_AR"), (NLLB, "fa", "pes_Arab"), (NLLB, "per", "pes_Arab"), (M2M100, "pes", "fa"),
    (NLLB, "fa-AF", "prs_Arab"), (NLLB, "prs", "prs_Arab"), (NLLB, "ms", "zsm_Latn"), (M2M100, "zsm", "ms"),
    (NLLB, "sw", "swh_Latn"), (NLLB, "et", "est_Latn"), (NLLB, "lv", "lvs_Latn"), (NLLB, "mn", "khk_Cyrl"),
    (NLLB, "no", "nob_Latn"), (NLLB, "nb", "nob_Latn"), (NLLB, "nn", "nno_Latn"), (M2M100, "nb", "no"),
    (NLLB, "tw", "twi_Latn"), (NLLB, "ak", "aka_Latn"), (M2M100, "nso", "ns"),
    # Chinese: a script or region narrows
    (NLLB, "zh-Hans", "zho_Hans"), (NLLB, "zh-CN", "zho_Hans"), (NLLB, "zh-SG", "zho_Hans"),
    (NLLB, "zh-Hant", "zho_Hant"), (NLLB, "zh-TW", "zho_Hant"), (NLLB, "zh-HK", "zho_Hant"),
    (NLLB, "zh_hant", "zho_Hant"), (NLLB, "zh-Hant-TW", "zho_Hant"), (NLLB, "yue", "yue_Hant"),
    (MBART50, "zh", "zh_CN"), (MBART50, "zh-Hans", "zh_CN"), (MBART50, "cmn", "zh_CN"), (M2M100, "zh-TW", "zh"),
    (MARIAN_ZHO, "zh", "cmn"), (MARIAN_ZHO, "zh-CN", "cmn_Hans"), (MARIAN_ZHO, "zh-TW", "cmn_Hant"),
    (MARIAN_ZHO, "zho_Hans", "cmn_Hans"), (MARIAN_ZHO, "yue-HK", "yue_Hant"), (MARIAN_ZHO, "nan", "nan"),
    (MARIAN_MUL, "zh-Hans", "zho_Hans"), (MARIAN_MUL, "cmn-Hans", "cmn_Hans"), (MARIAN_MUL, "zh-CN", "zho_Hans"),
    # regions and scripts elsewhere
    (MBART50, "pt-BR", "pt_XX"), (NLLB, "pt-BR", "por_Latn"), (MBART50, "bn-BD", "bn_IN"), (MBART50, "es-419", "es_XX"),
    (MARIAN_PT, "pt-BR", "pob"), (MARIAN_PT, "pt", "por"), (MARIAN_PT, "pt-PT", "por"), (MARIAN_PT, "pob", "pob"),
    (MARIAN_ROMANCE, "pt-BR", "pt_br"), (MARIAN_ROMANCE, "PT-BR", "pt_br"), (MARIAN_ROMANCE, "pt", "pt"),
    (MARIAN_ROMANCE, "por", "pt"), (MARIAN_ROMANCE, "es-MX", "es_MX"), (MARIAN_ROMANCE, "es-CO", "es"),
    (MARIAN_ROMANCE, "fr-FR", "fr_FR"), (MARIAN_ROMANCE, "fr-BE", "fr"),
    (M2M100, "sr-Latn", "sr"), (M2M100, "sh", "sr"), (NLLB, "sr", "srp_Cyrl"), (NLLB, "sr-Cyrl", "srp_Cyrl"),
    (MARIAN_MUL, "sr-Latn", "srp_Latn"), (MARIAN_MUL, "sr-ME", "srp_Latn"), (MARIAN_MUL, "sr-RS", "srp_Cyrl"),
    (NLLB, "ks-Deva", "kas_Deva"), (NLLB, "ks-IN", "kas_Arab"), (NLLB, "taq-Tfng", "taq_Tfng"),
    (NLLB, "tl", "tgl_Latn"), (NLLB, "fil", "tgl_Latn"), (MBART50, "tgl", "tl_XX"), (M2M100, "fil", "tl"),
    (["de"], "de", "de"), (["de"], "deu", "de"), (["de"], "de-CH", "de"), (["de"], " de ", "de"),
])
def test_examples(codes, requested, expected):
    assert match(requested, codes) == expected


@pytest.mark.parametrize("codes, requested, candidates", [
    (NLLB, "zh", ["zho_Hans", "zho_Hant"]), (NLLB, "ZH", ["zho_Hans", "zho_Hant"]),
    (NLLB, "cmn", ["zho_Hans", "zho_Hant"]), (NLLB, "ks", ["kas_Arab", "kas_Deva"]),
    (MARIAN_ZHO, "yue", ["yue_Hant", "yue_Hans"]), (MARIAN_MUL, "sr", ["srp_Cyrl", "srp_Latn"]),
    (["es_ES", "es_MX"], "es", ["es_ES", "es_MX"]), (["es_ES", "es_MX"], "es-419", ["es_ES", "es_MX"]),
])
def test_ambiguous(codes, requested, candidates):
    error = rejection(requested, codes)
    assert error.candidates == candidates
    assert str(error) == f"target_lang {requested!r} is ambiguous for this model: {', '.join(candidates)}"


def test_exact_match_wins_over_derived():
    assert match("cmn", ["zho", "cmn"]) == "cmn"
    assert match("zh", ["cmn", "zho"]) == "zho"  # the language as written beats its macrolanguage folding
    assert match("nb", ["no", "nb"]) == "nb" and match("no", ["nb", "no"]) == "no"
    assert match("pt_BR", MARIAN_ROMANCE) == "pt_BR" and match("pt_br", MARIAN_ROMANCE) == "pt_br"
    assert match("ar", ["ar", "arb_Arab"]) == "ar" and match("arb", ["ar", "arb"]) == "arb"
    assert match("ara", ["arb", "ara"]) == "ara"


@pytest.mark.parametrize("codes, requested", [
    (NLLB, "sr-Latn"), (NLLB, "sh"), (NLLB, "zh-Latn"), (MBART50, "zh-TW"), (MBART50, "zh-Hant"),
    (MBART50, "yue"), (M2M100, "yue"), (M2M100, "nn"), (MBART50, "no"), (MARIAN_ZHO, "ja"), (NLLB, "ar-Latn"),
    (NLLB, "xx"), (NLLB, "und"), (NLLB, "qaa"), (NLLB, "en-US-x-twain"), (NLLB, "i-klingon"), (NLLB, ">>xx<<"),
    (NLLB, "__xx__"), (NLLB, ">><<"), (NLLB, "fr-"), (NLLB, "-fr"), (NLLB, "fr_Latn_FR_X"), (NLLB, "Latn"),
    (M2M100, "ns-ZA-x"), (["de"], "fr"), (["de"], "german"), (["de"], "d"), (["de"], "x" * 1000),
])
def test_unsupported(codes, requested):
    error = rejection(requested, codes)
    assert (error.field, error.code, error.supported, error.candidates) == ("target_lang", requested, list(codes), [])
    assert str(error).startswith(f"target_lang {requested!r} is not supported by this model; supported: ")
    assert ", ".join(codes) in str(error) and "\n" not in str(error)


@pytest.mark.parametrize("requested", ["", " ", "\t"])
@pytest.mark.parametrize("field", ["source_lang", "target_lang"])
def test_empty_is_unsupported_and_names_the_field(requested, field):
    error = rejection(requested, ["de", "fr"], field)
    assert error.field == field and error.supported == ["de", "fr"]
    assert str(error) == (f"{field} {requested!r} is not supported by this model; supported: de, fr "
                          "(or ISO 639-1/639-3 codes)")


def test_error_is_a_value_error():
    assert isinstance(rejection("xx", ["de"]), ValueError)
    assert str(rejection("xx", [])).endswith("supported: none (or ISO 639-1/639-3 codes)")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_code_maps_to_itself(family):
    codes = FAMILIES[family]
    for code in codes:
        for spelled in (code, f">>{code}<<", f"__{code}__", code.upper(), code.lower(), code.swapcase(),
                        code.replace("_", "-")):
            assert match(spelled, codes) == code, spelled


@pytest.mark.parametrize("family", FAMILIES)
def test_iso_codes_map_back(family):
    """Every code's ISO code names that code, or is ambiguous between codes with that ISO code (NLLB only)."""
    codes = FAMILIES[family]
    ambiguous = {}
    for code in codes:
        iso = iso_code(code)
        assert iso is not None and iso.isalpha() and iso.islower() and len(iso) in (2, 3), code
        try:
            assert match(iso, codes) == code, (code, iso)
            assert match(iso.upper(), codes) == code
        except UnsupportedLanguage as error:
            assert error.candidates, (code, iso)
            ambiguous[iso] = set(error.candidates)
    assert ambiguous == (NLLB_AMBIGUOUS if family == "nllb" else {})
    for iso, candidates in ambiguous.items():  # genuinely ambiguous: one language, one code per script
        assert {iso_code(code) for code in candidates} == {iso}
        for code in candidates:
            script = code.split("_")[1]
            assert match(f"{iso}-{script}", codes) == code
            assert match(f"{code.split('_')[0]}-{script.upper()}", codes) == code


def test_nllb_codes_from_iso_and_script():
    for code in NLLB:
        language, script = code.split("_")
        assert match(f"{iso_code(code)}-{script}", NLLB) == code
        assert match(f"{language}-{script}", NLLB) == code
        if sum(c.startswith(f"{language}_") for c in NLLB) == 1:  # one script here: the ISO 639-3 code alone
            assert match(language, NLLB) == code


def test_mbart_codes_from_iso_and_region():
    for code in MBART50:
        language, region = code.split("_")
        assert match(f"{language}-{region}", MBART50) == code
        assert match(language, MBART50) == code
        assert match(iso_code(code), MBART50) == code


@pytest.mark.parametrize("code, iso", [
    ("fra_Latn", "fr"), ("fr_XX", "fr"), ("fr", "fr"), ("fra", "fr"), (">>fra<<", "fr"), ("arb_Arab", "ar"),
    ("zho_Hans", "zh"), ("zho_Hant", "zh"), ("cmn_Hans", "zh"), ("zh_CN", "zh"), ("pes_Arab", "fa"),
    ("prs_Arab", "prs"), ("zsm_Latn", "ms"), ("nob_Latn", "nb"), ("twi_Latn", "tw"), ("aka_Latn", "ak"),
    ("yue_Hant", "yue"), ("ast_Latn", "ast"), ("ns", "nso"), ("pob", "pt"), ("ar_AR", "ar"), ("he_IL", "he"),
    ("xx", None), ("", None), ("???", None), (">>xx<<", None),
])
def test_iso_code(code, iso):
    assert iso_code(code) == iso


def test_index_is_built_once_per_code_list_and_a_request_never_scans_the_codes(monkeypatch):
    """A request is looked up in the index: no model code is parsed again once it is built (microseconds a
    request rather than a pass over NLLB's 202 codes)."""
    assert language_index(tuple(NLLB)) is language_index(tuple(NLLB))
    index = LanguageIndex(NLLB)
    expected = {requested: index.match(requested, "target_lang") for requested in ("fra_Latn", "fr", "zh-TW", "pt-BR")}

    def parsed_again(code):
        raise AssertionError(f"a model code parsed per request: {code}")

    monkeypatch.setattr(languages, "_tag", parsed_again)
    assert {requested: index.match(requested, "target_lang") for requested in expected} == expected
    assert match_language("fr", NLLB, "target_lang") == expected["fr"]


def test_pure_python():
    """No torch, serving code or transformers: the standard library and langcodes only."""
    tree = ast.parse((Path(__file__).parents[2] / "model" / "text" / "languages.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "re", "functools", "typing", "langcodes"}, imported
