// The speech view (shown when the server has a speech model): an audio file chosen or recorded from the microphone,
// its transcript shown as text or as subtitles, in the spoken language or translated by the text models (timings
// kept), with a link to save the subtitles. The plain transcript streams from OpenAI's /v1/audio/transcriptions, a
// segment at a time as its window is decoded; subtitles and translations come whole from /v1/transcribe (there is
// no subtitle stream, and the cues are translated together once all are known).

import { ApiError, call, events } from "./api.js";
import { fillSelect, languageName } from "./catalog.js";
import { downloadName, offer } from "./files.js";
import { Recorder, canRecord } from "./recorder.js";

const $ = (id) => document.getElementById(id);
const clock = (seconds) => `${Math.floor(seconds / 60)}:${String(Math.floor(seconds % 60)).padStart(2, "0")}`;

export function setupSpeech({ catalog, report, changed }) {
  const model = $("speech-model"), target = $("subtitles-lang"), format = $("speech-format");
  const status = $("speech-status"), link = $("subtitles-download"), output = $("transcript");
  const audio = $("audio"), recordButton = $("record"), transcribeButton = $("transcribe");
  let recorder = null; // while recording
  // The chosen speech model's limits, from its card: a recording stops at the duration, a larger file is not sent.
  const limits = () => (catalog.speech.find((m) => m.id === model.value) ?? catalog.speech[0]).limits;
  $("tab-speech").hidden = catalog.speech.length === 0;
  $("speech-model-choice").hidden = catalog.speech.length < 2;
  recordButton.hidden = !canRecord();
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
    if (recorder || transcribeButton.disabled) return; // Ctrl+Enter while recording or transcribing
    const file = audio.files[0];
    if (!file) return report(new Error(`Choose ${recordButton.hidden ? "" : "or record "}an audio file first.`));
    const { max_audio_bytes: maxBytes } = limits();
    if (file.size > maxBytes) {
      const mb = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
      return report(new Error(`${file.name} is ${mb(file.size)}; this server takes audio files of ${mb(maxBytes)} `
                              + "at most."));
    }
    if (link.href) URL.revokeObjectURL(link.href);
    link.hidden = true;
    output.value = "";
    status.textContent = "Transcribing…";
    transcribeButton.disabled = recordButton.disabled = true;
    try {
      await (format.value === "text" && !target.value ? streamed(file) : whole(file));
      status.textContent = "Done.";
      report(null);
    } catch (error) {
      status.textContent = "";
      report(error);
    } finally {
      transcribeButton.disabled = recordButton.disabled = false;
    }
  }

  function recording(on) {
    recordButton.textContent = on ? "Stop" : "Record";
    recordButton.classList.toggle("recording", on);
    transcribeButton.disabled = on;
  }

  function showTime(seconds) {
    const most = limits().max_audio_seconds;
    status.textContent = `Recording ${clock(seconds)} (at most ${clock(most)})`;
    if (seconds >= most && recorder) stop();
  }

  async function record() {
    recordButton.disabled = true; // until the microphone is allowed or refused
    status.textContent = "Asking for the microphone…";
    try {
      recorder = await Recorder.start(limits().max_audio_seconds, showTime);
      recording(true);
      report(null);
    } catch (error) {
      status.textContent = "";
      report(new Error(`Microphone: ${error.message}`)); // "Permission denied", "Requested device not found"
    } finally {
      recordButton.disabled = false;
    }
  }

  // The recording becomes the chosen file (Transcribe sends it again in another format), then is transcribed.
  async function stop() {
    const stopping = recorder;
    recorder = null;
    recording(false);
    recordButton.disabled = true; // until the file is made
    try {
      const chosen = new DataTransfer();
      chosen.items.add(await stopping.stop());
      audio.files = chosen.files;
    } catch (error) {
      status.textContent = "";
      return report(error);
    } finally {
      recordButton.disabled = false;
    }
    await transcribe();
  }

  for (const control of [model, target, format]) control.addEventListener("change", changed);
  transcribeButton.addEventListener("click", transcribe);
  recordButton.addEventListener("click", () => (recorder ? stop() : record()));
  return { run: transcribe };
}
