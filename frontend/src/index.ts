// Entry point loaded by TensorBoard's plugin_entry.html: `import("./index.js").then(m => m.render())`.
import { App } from "./app";

export async function render(): Promise<void> {
  const app = new App();
  app.mount(document.body);
}
