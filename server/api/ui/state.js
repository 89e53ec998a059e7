// The page's state in its URL, so a link reproduces it: the view, and every control marked data-state="name"
// (?view=text&source=auto&target=fr&q=forty-two).

export function restore(view) {
  const params = new URLSearchParams(location.search);
  for (const control of document.querySelectorAll("[data-state]")) {
    const value = params.get(control.dataset.state);
    if (value !== null) control.value = value;
  }
  return params.get("view") ?? view;
}

export function save(view) {
  const params = new URLSearchParams({ view });
  for (const control of document.querySelectorAll("[data-state]")) {
    if (control.value) params.set(control.dataset.state, control.value);
  }
  history.replaceState(null, "", `?${params}`);
}
