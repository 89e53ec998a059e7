// The speech view (shown when the server has a speech model): an audio file sent to /v1/transcribe, its transcript
// shown as text or as subtitles, in the spoken language or translated by the text models (timings kept), with a
// link to save the subtitles.

import { call } from "./api.js";
import { fillSelect, languageName } from "./catalog.js";
import { downloadName, offer } from "./files.js";

const $ = (id) => document.getElementById(id);

export function setupSpeech({ catalog, report, changed }) {
  const model = $("speech-model"), target = $("subtitles-lang"), format = $("speech-format");
  const status = $("speech-status"), link = $("subtitles-download"), output = $("transcript");
  $("tab-speech").hidden = catalog.speech.length === 0;
  $("speech-model-choice").hidden = catalog.speech.length < 2;
  fillSelect(model, catalog.speech.map((m) => m.id));
  fillSelect(target, catalog.languages(), (code) => `${languageName(code)} (${code})`, [target.options[0]]);

  async function transcribe() {
    const file = $("audio").files[0];
    if (!file) return report(new Error("Choose an audio file first."));
    const form = new FormData();
    form.append("file", file);
    form.append("format", format.value);
    if (model.value) form.append("model", model.value);
    if (target.value) form.append("target_lang", target.value);
    if (link.href) URL.revokeObjectURL(link.href);
    link.hidden = true;
    output.value = "";
    status.textContent = "Transcribing…";
    $("transcribe").disabled = true;
    try {
      const response = await call("v1/transcribe", { body: form });
      const body = await response.text();
      output.value = body;
      if (format.value !== "text") {
        const name = downloadName(response.headers.get("content-disposition"), file.name);
        offer(link, new Blob([body], { type: "text/plain" }), name);
      }
      status.textContent = "Done.";
      report(null);
    } catch (error) {
      status.textContent = "";
      report(error);
    } finally {
      $("transcribe").disabled = false;
    }
  }

  for (const control of [model, target, format]) control.addEventListener("change", changed);
  $("transcribe").addEventListener("click", transcribe);
  return { run: transcribe };
}
