// The speech view (shown when the server has a speech model): an audio file chosen, its transcript shown as text or
// as subtitles, in the spoken language or translated by the text models (timings kept), with a link to save the
// subtitles. The plain transcript streams from OpenAI's /v1/audio/transcriptions, a segment at a time as its window
// is decoded; subtitles and translations come whole from /v1/transcribe (there is no subtitle stream, and the cues
// are translated together once all are known).

import { ApiError, call, events } from "./api.js";
import { fillSelect, languageName } from "./catalog.js";
import { downloadName, offer } from "./files.js";

const $ = (id) => document.getElementById(id);

export function setupSpeech({ catalog, report, changed }) {
  const model = $("speech-model"), target = $("subtitles-lang"), format = $("speech-format");
  const status = $("speech-status"), link = $("subtitles-download"), output = $("transcript");
  const audio = $("audio"), transcribeButton = $("transcribe");
  $("tab-speech").hidden = catalog.speech.length === 0;
  $("speech-model-choice").hidden = catalog.speech.length < 2;
  fillSelect(model, catalog.speech.map((m) => m.id));
  fillSelect(target, catalog.languages(), (code) => `${languageName(code)} (${code})`, [target.options[0]]);

  async function streamed(file) {
    const form = new FormData();
    form.append("file", file);
    form.append("model", model.value);
    form.append("response_format", "text");
    form.append("stream", "true");
    for await (const event of events(await call("v1/audio/transcriptions", { body: form }))) {
      if (event.error) throw new ApiError(null, event.error.message);
      if (event.type === "transcript.text.delta") output.value += event.delta;
      if (event.type === "transcript.text.done") output.value = event.text;
    }
  }

  async function whole(file) {
    const form = new FormData();
    form.append("file", file);
    form.append("format", format.value);
    if (model.value) form.append("model", model.value);
    if (target.value) form.append("target_lang", target.value);
    const response = await call("v1/transcribe", { body: form });
    const body = await response.text();
    output.value = body;
    if (format.value !== "text") {
      const name = downloadName(response.headers.get("content-disposition"), file.name);
      offer(link, new Blob([body], { type: "text/plain" }), name);
    }
  }

  async function transcribe() {
    if (transcribeButton.disabled) return; // Ctrl+Enter while transcribing
    const file = audio.files[0];
    if (!file) return report(new Error("Choose an audio file first."));
    if (link.href) URL.revokeObjectURL(link.href);
    link.hidden = true;
    output.value = "";
    status.textContent = "Transcribing…";
    transcribeButton.disabled = true;
    try {
      await (format.value === "text" && !target.value ? streamed(file) : whole(file));
      status.textContent = "Done.";
      report(null);
    } catch (error) {
      status.textContent = "";
      report(error);
    } finally {
      transcribeButton.disabled = false;
    }
  }

  for (const control of [model, target, format]) control.addEventListener("change", changed);
  transcribeButton.addEventListener("click", transcribe);
  return { run: transcribe };
}
