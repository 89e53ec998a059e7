// The server's own API, named relative to the page (so a route prefix keeps working), with the API key this
// browser keeps. Errors carry the API's message, which names the field and the limit.

const KEY = "seq2seq-serve.api-key";

export const apiKey = {
  get: () => localStorage.getItem(KEY) || "",
  set: (key) => (key ? localStorage.setItem(KEY, key) : localStorage.removeItem(KEY)),
};

export class ApiError extends Error {
  constructor(status, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter; // seconds (429, 503), from Retry-After
  }
}

// An error answer's message: the native {"error": {"message"}}, FastAPI's {"detail"}, else the status line.
export function apiError(status, statusText, bodyText, retryAfter) {
  let message = `${status} ${statusText}`;
  try {
    const body = JSON.parse(bodyText);
    message = body.error?.message ?? body.detail ?? message;
  } catch {
    // not JSON (a proxy's page): the status line says enough
  }
  return new ApiError(status, message, retryAfter === null ? null : Number(retryAfter));
}

export function authorization() {
  const key = apiKey.get();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// fetch() of an API path: a JSON body for a plain object, as is for FormData, more `headers`; throws ApiError
// unless 2xx.
export async function call(path, { body, signal, headers = {} } = {}) {
  const isJson = body !== undefined && !(body instanceof FormData);
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: { ...authorization(), ...headers, ...(isJson ? { "Content-Type": "application/json" } : {}) },
    body: isJson ? JSON.stringify(body) : body,
    signal,
  });
  if (!response.ok) {
    throw apiError(response.status, response.statusText, await response.text(),
                   response.headers.get("retry-after"));
  }
  return response;
}

export async function json(path, options) {
  return (await call(path, options)).json();
}

// The server-sent events of a stream (/v1/generate, /v1/audio/transcriptions): each event's data as JSON, until
// [DONE] or the stream's end.
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const data = buffer.slice(0, end).split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trim()).join("\n");
      buffer = buffer.slice(end + 2);
      if (data === "[DONE]") return;
      if (data) yield JSON.parse(data);
    }
  }
}

// What the page shows for an error: the API's message, and when to retry where the server said.
export function describe(error) {
  const retry = error.retryAfter != null ? ` Try again in ${error.retryAfter} s.` : "";
  return `${error.message}${retry}`;
}
