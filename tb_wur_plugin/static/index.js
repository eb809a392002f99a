// Placeholder tab until the frontend bundle is built (see frontend/).
export function render() {
  const message = document.createElement("p");
  message.textContent = "WUR: the data is logged; this tab's views are not built yet.";
  message.style.fontFamily = "Roboto, sans-serif";
  const ready = document.createElement("div");
  ready.setAttribute("data-testid", "wur-ready");
  ready.append(message);
  document.body.append(ready);
}
