// The files view: a document picked or dropped, submitted to /v1/documents as a job with the languages chosen
// above; the job's progress polled and shown, then a link to download the translated file. XMLHttpRequest for the
// upload, because only it reports an upload's progress.

import { apiError, authorization, call, json } from "./api.js";

const POLL_MS = 500;

const $ = (id) => document.getElementById(id);

export function downloadName(disposition, fallback) {
  const match = /filename\*=UTF-8''([^;]+)/i.exec(disposition ?? "");
  return match ? decodeURIComponent(match[1]) : fallback;
}

// `link` made to save `blob` as `name` (the object URL it held before is the caller's to revoke).
export function offer(link, blob, name) {
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.textContent = `Download ${name}`;
  link.hidden = false;
}

function submit(form, progress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "v1/documents");
    for (const [name, value] of Object.entries(authorization())) xhr.setRequestHeader(name, value);
    xhr.responseType = "json";
    xhr.upload.onprogress = (e) => progress("Uploading", e.lengthComputable ? e.loaded / e.total : null);
    xhr.onerror = () => reject(new Error("the connection to the server failed"));
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve(xhr.response);
      else {
        const retryAfter = xhr.getResponseHeader("retry-after");
        reject(apiError(xhr.status, xhr.statusText, JSON.stringify(xhr.response), retryAfter));
      }
    };
    xhr.send(form);
  });
}

// The job polled until it is done (its file's response) or failed (an Error with the job's message).
async function finished(handle, progress) {
  const path = `v1/documents/${encodeURIComponent(handle.document_id)}`;
  const keyed = { "X-Document-Key": handle.document_key };
  for (;;) {
    const job = await json(path, { headers: keyed });
    if (job.status === "error") throw new Error(job.error_message);
    if (job.status === "done") return call(`${path}/result`, { headers: keyed });
    const left = job.seconds_remaining == null ? "" : ` about ${job.seconds_remaining} s left`;
    progress(job.status === "queued" ? "Queued" : `Translating${left}`, job.status === "queued" ? null : job.progress);
    await new Promise((wake) => setTimeout(wake, POLL_MS));
  }
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
      const response = await finished(await submit(form, progress), progress);
      offer(link, await response.blob(), downloadName(response.headers.get("content-disposition"), file.name));
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
