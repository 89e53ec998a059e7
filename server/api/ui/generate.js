// The generate view: a prompt with the decoding knobs of /v1/generate (the form's input names are the API's
// fields), the output streamed as its events arrive, and a stop button that aborts the request (the server
// then cancels the sequence).

import { ApiError, call, events } from "./api.js";
import { fillSelect, languageName } from "./catalog.js";

const $ = (id) => document.getElementById(id);

export function setupGenerate({ catalog, report, changed }) {
  const model = $("gen-model"), target = $("gen-target"), output = $("gen-output"), status = $("gen-status");
  const knobs = $("knobs");
  let running = null;

  function modelChanged() {
    const card = catalog.model(model.value);
    const targets = catalog.targets(card.id);
    fillSelect(target, targets, (code) => `${languageName(code)} (${code})`);
    $("gen-target-choice").hidden = targets.length === 0; // text-to-text models take the prompt alone
    knobs.elements.max_new_tokens.max = card.limits.max_new_tokens;
    knobs.elements.num_beams.max = card.limits.max_beams;
    changed();
  }

  function body() {
    const given = [...knobs.elements].filter((input) => input.value !== "");
    const request = { text: $("prompt").value, model: model.value, stream: true,
                      ...Object.fromEntries(given.map((input) => [input.name, Number(input.value)])) };
    if (!$("gen-target-choice").hidden) request.target_lang = target.value;
    return request;
  }

  async function generate() {
    if (!knobs.reportValidity()) return;
    running?.abort();
    running = new AbortController();
    output.value = "";
    output.dataset.events = 0;
    status.textContent = "Generating…";
    $("stop").disabled = false;
    $("generate").disabled = true;
    try {
      for await (const event of events(await call("v1/generate", { body: body(), signal: running.signal }))) {
        if (event.error) throw new ApiError(event.error.status, event.error.message);
        output.value += event.text;
        output.dataset.events = Number(output.dataset.events) + 1;
        if (event.finish_reason) {
          status.textContent = `Finished (${event.finish_reason}), ${event.usage.output_tokens} tokens.`;
        }
      }
      report(null);
    } catch (error) {
      if (error.name === "AbortError") status.textContent = "Stopped.";
      else { status.textContent = ""; report(error); }
    } finally {
      $("stop").disabled = true;
      $("generate").disabled = false;
    }
  }

  fillSelect(model, catalog.models.map((m) => m.id));
  model.addEventListener("change", modelChanged);
  $("prompt").addEventListener("input", changed);
  $("generate").addEventListener("click", generate);
  $("stop").addEventListener("click", () => running?.abort());
  modelChanged();
  return { run: generate };
}
