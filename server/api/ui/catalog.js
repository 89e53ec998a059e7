// What the served models offer, from /v1/models: the languages (by the code the API takes) with readable
// names, which models serve a pair, and the server's limits.

import { json } from "./api.js";

const names = new Intl.DisplayNames(["en"], { type: "language" });

export function languageName(code) {
  try {
    return names.of(code) ?? code;
  } catch {
    return code; // a model's own code that is no BCP-47 tag (fra_Latn)
  }
}

const codeOf = (language) => language.iso ?? language.code;
const has = (languages, code) => languages.some((language) => codeOf(language) === code);

export class Catalog {
  // `models`: the text models, which the text, files and generate views use; `speech`: the speech models.
  constructor(models) {
    this.models = models.filter((m) => !m.speech);
    this.speech = models.filter((m) => m.speech);
  }

  static async load() {
    return new Catalog((await json("v1/models")).data);
  }

  // Every language of every model, either side, sorted by name: swap must find both ends in both pickers.
  languages() {
    const codes = new Set(this.models.flatMap((m) => [...m.source_languages, ...m.target_languages].map(codeOf)));
    return [...codes].sort((a, b) => languageName(a).localeCompare(languageName(b)));
  }

  targets(modelId) {
    return this.model(modelId).target_languages.map(codeOf);
  }

  serving(source, target) {
    return this.models.filter((m) => (source === "auto" || has(m.source_languages, source))
                                     && has(m.target_languages, target));
  }

  model(id) {
    return this.models.find((m) => m.id === id) ?? this.models[0];
  }

  // The limits are the server's; every model card carries them.
  get limits() {
    return this.models[0].limits;
  }
}

export function fillSelect(select, values, label = (value) => value, keep = []) {
  const current = select.value;
  select.replaceChildren(...keep, ...values.map((value) => new Option(label(value), value)));
  if ([...select.options].some((option) => option.value === current)) select.value = current;
}
