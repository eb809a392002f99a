// The guest side of TensorBoard's iframe plugin message protocol
// (tensorboard/components/experimental/plugin_lib): the guest posts "experimental.bootstrap"
// to its parent with one end of a MessageChannel; messages are JSON strings
// {type, id, payload, error, isReply}. The host broadcasts experimental.DataReloaded and
// experimental.RunsChanged and answers experimental.GetRuns; every message that is not a
// reply gets a reply.

export interface Message {
  type: string;
  id: number;
  payload: unknown;
  error: string | null;
  isReply: boolean;
}

export interface PortLike {
  postMessage(data: string): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  start?(): void;
}

type Listener = (payload: unknown) => unknown | Promise<unknown>;

export class HostChannel {
  private nextId = 0;
  private readonly waits = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly listeners = new Map<string, Listener>();

  constructor(private readonly port: PortLike) {
    port.addEventListener("message", (event) => void this.onMessage(event.data));
    port.start?.();
  }

  /** Connects to the parent window (TensorBoard's host page); null when not in a frame. */
  static connect(win: Window = window): HostChannel | null {
    if (!win.parent || win.parent === win) return null;
    const { port1, port2 } = new MessageChannel();
    const channel = new HostChannel(port1 as unknown as PortLike);
    win.parent.postMessage("experimental.bootstrap", "*", [port2]);
    return channel;
  }

  listen(type: string, callback: Listener): void {
    this.listeners.set(type, callback);
  }

  send(type: string, payload?: unknown): Promise<unknown> {
    const id = this.nextId++;
    const message: Message = { type, id, payload: payload ?? null, error: null, isReply: false };
    this.port.postMessage(JSON.stringify(message));
    return new Promise((resolve, reject) => this.waits.set(id, { resolve, reject }));
  }

  private async onMessage(data: unknown): Promise<void> {
    let message: Message;
    try {
      message = parseMessage(data);
    } catch {
      return; // not ours
    }
    if (message.isReply) {
      const wait = this.waits.get(message.id);
      if (!wait) return;
      this.waits.delete(message.id);
      if (message.error) wait.reject(new Error(message.error));
      else wait.resolve(message.payload);
      return;
    }
    let payload: unknown = null;
    let error: string | null = null;
    const listener = this.listeners.get(message.type);
    if (listener) {
      try {
        payload = (await listener(message.payload)) ?? null;
      } catch (e) {
        error = e instanceof Error ? e.message : String(e);
      }
    }
    const reply: Message = { type: message.type, id: message.id, payload, error, isReply: true };
    this.port.postMessage(JSON.stringify(reply));
  }
}

export function parseMessage(data: unknown): Message {
  if (typeof data !== "string") throw new Error("message is not a string");
  const m = JSON.parse(data);
  if (!m || typeof m !== "object" || typeof m.type !== "string" || typeof m.id !== "number") {
    throw new Error("malformed message");
  }
  return { type: m.type, id: m.id, payload: m.payload ?? null, error: m.error ?? null, isReply: !!m.isReply };
}
