// The text view: translate as you type (debounced, the previous request aborted) or on demand, with the
// detected language, beam alternatives, a glossary of terms to keep, a character counter against the server's
// limit, swap and copy.

import { json } from "./api.js";
import { languageName } from "./catalog.js";

const TYPING_PAUSE_MS = 400;
const $ = (id) => document.getElementById(id);

// The glossary box's "source = target" lines as /v1/translate's glossary; null when it holds none.
function glossaryTerms(lines) {
  const terms = {};
  lines.split("\n").forEach((line, index) => {
    if (!line.trim()) return;
    const at = line.indexOf("=");
    if (at < 0) throw new Error(`Glossary line ${index + 1}: write "source = target"`);
    terms[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  });
  return Object.keys(terms).length ? terms : null;
}

export function setupText({ catalog, report, changed }) {
  const text = $("text"), output = $("translation"), counter = $("counter"), detected = $("detected");
  const source = $("source"), target = $("target"), model = $("model"), alternatives = $("alternatives");
  const list = $("alternatives-list"), glossary = $("glossary");
  let pending = null, timer = null, detectedCode = null;

  // one text: the request's characters and the text's characters are both limited
  const limit = Math.min(catalog.limits.max_request_chars, catalog.limits.max_document_chars);
  alternatives.max = catalog.limits.max_beams - 1;

  function count() {
    counter.value = `${text.value.length.toLocaleString("en")} / ${limit.toLocaleString("en")} characters`;
    counter.classList.toggle("over", text.value.length > limit);
  }

  function show(translation) {
    output.value = translation?.text ?? "";
    const found = translation?.detected_language;
    detectedCode = found?.language ?? null;
    detected.textContent = found
      ? `Detected: ${languageName(found.language)} (${Math.round(found.confidence * 100)} %)` : "";
    const others = translation?.alternatives ?? [];
    list.replaceChildren(...others.map((a) => Object.assign(document.createElement("li"), { textContent: a.text })));
    list.hidden = others.length === 0;
  }

  async function translate() {
    clearTimeout(timer);
    pending?.abort();
    if (!text.value.trim()) return show(null);
    pending = new AbortController();
    const body = { text: text.value, source_lang: source.value, target_lang: target.value };
    if (model.value) body.model = model.value;
    const extra = Number(alternatives.value);
    if (extra > 0) { // n-best from beam search: at least as many beams as hypotheses asked for
      body.n_best = extra + 1;
      body.beam_size = Math.max(extra + 1, catalog.model(model.value).default_beam_size);
    }
    try {
      const terms = glossaryTerms(glossary.value);
      if (terms) body.glossary = terms;
      const result = await json("v1/translate", { body, signal: pending.signal });
      report(null);
      show(result.translations[0]);
    } catch (error) {
      if (error.name !== "AbortError") report(error);
    }
  }

  function edited() {
    count();
    changed();
    clearTimeout(timer);
    if ($("as-you-type").checked) timer = setTimeout(translate, TYPING_PAUSE_MS);
  }

  function swap() {
    const from = source.value === "auto" ? detectedCode : source.value;
    if (!from) return;
    source.value = target.value;
    target.value = from;
    [text.value, output.value] = [output.value, text.value];
    languagesChanged();
  }

  async function copy() {
    if (navigator.clipboard) await navigator.clipboard.writeText(output.value);
    else { output.select(); document.execCommand("copy"); } // no clipboard API outside a secure context
    $("copy").textContent = "Copied";
    setTimeout(() => { $("copy").textContent = "Copy"; }, 1500);
  }

  // a model picker only where more than one model serves the pair
  function languagesChanged() {
    const serving = catalog.serving(source.value, target.value).map((m) => m.id);
    const keep = model.options[0];
    const current = model.value;
    model.replaceChildren(keep, ...serving.map((id) => new Option(id, id)));
    model.value = serving.includes(current) ? current : "";
    $("model-choice").hidden = serving.length < 2;
    edited();
  }

  text.addEventListener("input", edited);
  alternatives.addEventListener("change", edited);
  glossary.addEventListener("input", edited);
  $("glossary-box").open = Boolean(glossary.value); // a link with terms shows them
  for (const select of [source, target]) select.addEventListener("change", languagesChanged);
  model.addEventListener("change", edited);
  $("translate").addEventListener("click", translate);
  $("swap").addEventListener("click", swap);
  $("copy").addEventListener("click", copy);
  languagesChanged();
  return { run: translate };
}
