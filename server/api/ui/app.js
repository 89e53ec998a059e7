// The page's entry: loads the served models (asking for an API key when the server wants one), fills the
// language pickers, switches views, keeps the state in the URL, and binds Ctrl+Enter.

import { apiKey, describe } from "./api.js";
import { Catalog, fillSelect, languageName } from "./catalog.js";
import { setupFiles } from "./files.js";
import { setupGenerate } from "./generate.js";
import { setupSpeech } from "./speech.js";
import { restore, save } from "./state.js";
import { setupText } from "./text.js";

const $ = (id) => document.getElementById(id);
const VIEWS = ["text", "files", "generate", "speech"];
let view = "text";
let views = null; // each view's run(), once the models are known

// Errors go to one alert line; a 401 also opens the key form.
function report(error) {
  $("error").hidden = !error;
  $("error").textContent = error ? describe(error) : "";
  if (error?.status === 401) {
    $("key-form").hidden = false;
    $("api-key").focus();
  }
}

function show(name) {
  view = VIEWS.includes(name) ? name : "text";
  for (const each of VIEWS) {
    $(`view-${each}`).hidden = each !== view;
    if (each === view) $(`tab-${each}`).setAttribute("aria-current", "page");
    else $(`tab-${each}`).removeAttribute("aria-current");
  }
  $("languages").hidden = view === "generate" || view === "speech";
  save(view);
}

async function start() {
  let catalog;
  try {
    catalog = await Catalog.load();
  } catch (error) {
    return report(error);
  }
  report(null);
  $("key-form").hidden = true;
  if (views) return; // a key given again later: the views are set up already
  const label = (code) => `${languageName(code)} (${code})`;
  fillSelect($("source"), catalog.languages(), label, [$("source").options[0]]);
  fillSelect($("target"), catalog.languages(), label);
  $("target").value = catalog.models[0].target_languages[0]?.iso ?? $("target").value;
  const changed = () => save(view);
  const initial = restore(view); // before the views read the controls; again once dependent pickers are filled
  views = { text: setupText({ catalog, report, changed }), generate: setupGenerate({ catalog, report, changed }),
            speech: setupSpeech({ catalog, report, changed }) };
  setupFiles({ report });
  restore(view);
  show(initial);
}

document.addEventListener("keydown", (e) => {
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && views?.[view]) {
    e.preventDefault();
    views[view].run();
  }
});
for (const name of VIEWS) $(`tab-${name}`).addEventListener("click", () => show(name));
$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  apiKey.set($("api-key").value.trim());
  start();
});
start();
