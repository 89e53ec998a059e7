// The files view: a .txt, .html, .srt or .docx file picked or dropped, sent to /v1/translate/file with the
// languages chosen above, and a link to download the translated file. XMLHttpRequest, not fetch, because
// only it reports the upload's progress.

import { apiError, authorization } from "./api.js";

const $ = (id) => document.getElementById(id);

function downloadName(disposition, fallback) {
  const match = /filename\*=UTF-8''([^;]+)/i.exec(disposition ?? "");
  return match ? decodeURIComponent(match[1]) : fallback;
}

function send(form, progress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "v1/translate/file");
    for (const [name, value] of Object.entries(authorization())) xhr.setRequestHeader(name, value);
    xhr.responseType = "blob";
    xhr.upload.onprogress = (e) => progress("Uploading", e.lengthComputable ? e.loaded / e.total : null);
    xhr.upload.onload = () => progress("Translating", null);
    xhr.onprogress = (e) => progress("Downloading", e.lengthComputable ? e.loaded / e.total : null);
    xhr.onerror = () => reject(new Error("the connection to the server failed"));
    xhr.onload = async () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve(xhr);
      else {
        const retryAfter = xhr.getResponseHeader("retry-after");
        reject(apiError(xhr.status, xhr.statusText, await xhr.response.text(), retryAfter));
      }
    };
    xhr.send(form);
  });
}

export function setupFiles({ report }) {
  const input = $("file"), drop = $("drop"), bar = $("file-progress"), status = $("file-status");
  const link = $("download");

  function progress(stage, share) {
    bar.hidden = false;
    if (share === null) bar.removeAttribute("value"); // indeterminate while the server translates
    else bar.value = share;
    status.textContent = `${stage}…`;
  }

  async function translate() {
    const file = input.files[0];
    if (!file) return report(new Error("Choose a file first."));
    const form = new FormData();
    form.append("file", file);
    for (const [field, id] of [["source_lang", "source"], ["target_lang", "target"], ["model", "model"]]) {
      if ($(id).value) form.append(field, $(id).value);
    }
    if (link.href) URL.revokeObjectURL(link.href);
    link.hidden = true;
    $("translate-file").disabled = true;
    try {
      const xhr = await send(form, progress);
      const name = downloadName(xhr.getResponseHeader("content-disposition"), file.name);
      link.href = URL.createObjectURL(xhr.response);
      link.download = name;
      link.textContent = `Download ${name}`;
      link.hidden = false;
      status.textContent = "Translated.";
      report(null);
    } catch (error) {
      status.textContent = "Not translated.";
      report(error);
    } finally {
      bar.hidden = true;
      $("translate-file").disabled = false;
    }
  }

  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    input.files = e.dataTransfer.files;
    status.textContent = input.files[0] ? `${input.files[0].name} chosen.` : "";
  });
  input.addEventListener("change", () => { status.textContent = ""; link.hidden = true; });
  $("translate-file").addEventListener("click", translate);
}
