"""The text layer alone (no model): sentences and their separators, over-long sentences cut to fit, HTML and XML
round trips with a stand-in translator (upper case), inline tags put back exactly once, alignments asked only for
the units that hold them."""

import re

import pytest

from model import MarkupError, prepare
from model.text import translate_texts


def shout(document) -> str:
    return document.render([unit.upper() for unit in document.units])


def test_lines_paragraphs_and_whitespace_come_back_exactly():
    text = "  First one. Second one!\n\nThird,  here?\r\nFourth.  \n"
    document = prepare(text, "en")
    assert document.units == ["First one.", "Second one!", "Third,  here?", "Fourth."]
    assert shout(document) == text.upper()


def test_split_modes():
    text = "One two\nthree four. Five."
    assert prepare(text, "en", split_sentences="0").units == [text]
    assert prepare(text, "en", split_sentences="1").units == ["One two", "three four.", "Five."]
    assert prepare(text, "en", split_sentences="nonewlines").units == ["One two\nthree four.", "Five."]
    with pytest.raises(ValueError, match="split_sentences"):
        prepare(text, "en", split_sentences="2")


def test_an_over_long_sentence_is_cut_into_pieces_that_fit():
    sentence = "alpha beta gamma, delta epsilon zeta; " + " ".join(f"w{i}" for i in range(40)) + "."
    fits = lambda s: len(s.split()) <= 8  # noqa: E731
    units = prepare(sentence, "en", fits=fits).units
    assert all(fits(u) for u in units) and len(units) > 5
    assert units[0] == "alpha beta gamma, delta epsilon zeta;"  # whole clauses, as many as fit
    assert re.sub(r"\s+", " ", " ".join(units)) == sentence.strip()
    assert prepare(sentence, "en", split_sentences="0", fits=fits).units == [sentence]  # "0": never cut


HTML = ('<!DOCTYPE html>\n<html><head><title>A page.</title><style>p { color: red; }</style></head>\n'
        '<body class="x" data-a=\'1 &amp; 2\'>\n<!-- a comment. -->\n'
        '<p id="p1">The <b>quick</b> brown fox &amp; <a href="/dog?a=1&amp;b=2">the dog</a>. It runs.</p>\n'
        '<script>if (a < b && c) { alert("Hi."); }</script>\n'
        '<p>Keep <code translate="no">x = y</code> here.<br>Next line<img src="i.png" alt="An image"></p>\n'
        '</body></html>\n')


def tags(text: str) -> list[str]:
    return re.findall(r"<[^>]*>", text)


def test_html_round_trip_keeps_every_tag_comment_and_script_and_translates_text():
    document = prepare(HTML, "en", format="html", split_sentences="nonewlines", ignore_tags=["code"])
    assert "The quick brown fox & the dog." in document.units and "It runs." in document.units
    assert not any("color" in u or "alert" in u or "x = y" in u or "comment" in u for u in document.units)
    out = shout(document)
    assert tags(out) == tags(HTML)  # every tag once, in order, attributes byte for byte
    for kept in ("<!-- a comment. -->", '<script>if (a < b && c) { alert("Hi."); }</script>',
                 "<style>p { color: red; }</style>", '<code translate="no">x = y</code>', "<!DOCTYPE html>"):
        assert kept in out
    assert "<b>QUICK</b>" in out and ">THE DOG</a>" in out and "FOX &amp; " in out and "A PAGE." in out
    assert document.render(document.units) == HTML  # translating nothing changes nothing


def test_inline_tags_follow_the_alignment_and_are_never_lost_or_repeated():
    document = prepare("A <b>red</b> house.", "en", format="html")
    assert document.units == ["A red house."]
    proportional = document.render(["Une maison rouge."])
    assert proportional.count("<b>") == proportional.count("</b>") == 1
    aligned = document.render(["Une maison rouge."], alignments=[[(0, 0), (1, 2), (2, 1), (3, 3)]])
    assert aligned == "Une maison <b>rouge</b>."  # red → rouge
    assert document.render([""]).count("<b></b>") == 1  # nothing to wrap: the tags still come back


def test_only_units_with_inline_marks_ask_for_an_alignment():
    html = "<p>A <b>red</b> house. No tags.</p>"
    assert prepare(html, "en", format="html").marked_units() == [0]
    french = {"plain": "simple", "A red house.": "Une maison rouge.", "No tags.": "Pas de balises."}
    asked = []

    def align(marked: list[int]) -> list:
        asked.append(marked)
        return [[(0, 0), (1, 2), (2, 1), (3, 3)]]

    out = translate_texts(["plain", html], "en", lambda units: [french[u] for u in units], align=align, format="html")
    assert asked == [[1]]  # units counted over both texts: "plain" is unit 0
    assert out == ["simple", "<p>Une maison <b>rouge</b>. Pas de balises.</p>"]


XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<doc><title>The title.</title>'
       '<p>Hello <x id="0"/> world &amp; <i>you</i>. Bye.<!-- note --></p>'
       '<p><![CDATA[<raw> stays.]]></p><skip>Not this.</skip></doc>\n')


def test_xml_round_trip_keeps_placeholders_cdata_and_ignored_elements():
    document = prepare(XML, "en", format="xml", ignore_tags=["skip"])
    assert document.units == ["The title.", "Hello  world & you.", "Bye."]
    out = shout(document)
    assert tags(out) == tags(XML)
    assert '<x id="0"/>' in out and "<![CDATA[<raw> stays.]]>" in out and "<skip>Not this.</skip>" in out
    assert "<i>YOU</i>." in out and "&amp;" in out


def test_an_xml_fragment_and_a_broken_document():
    assert shout(prepare('Press <x id="1"></x> now.', "en", format="xml")) == 'PRESS <x id="1"></x> NOW.'
    with pytest.raises(MarkupError, match="not well-formed"):
        prepare("<p>open <b>never closed</p>", "en", format="xml")
