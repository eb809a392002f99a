import { test } from "node:test";
import assert from "node:assert/strict";
import { HostChannel, parseMessage, PortLike } from "../src/protocol";
import { compileFilter, runColor, runColorOf, safeFileName } from "../src/dom";
import { parseJsonNumbers, query } from "../src/api";

/** A host on the other end of a real MessageChannel, speaking TensorBoard's JSON messages. */
function pair() {
  const { port1, port2 } = new MessageChannel();
  const guest = new HostChannel(port1 as unknown as PortLike);
  const received: any[] = [];
  port2.on("message", (data: string) => received.push(JSON.parse(data)));
  const next = async (n: number) => {
    for (let i = 0; i < 200 && received.length < n; i++) await new Promise((r) => setTimeout(r, 5));
    return received;
  };
  return { guest, host: port2, received, next, close: () => { port1.close(); port2.close(); } };
}

test("a broadcast from the host runs the listener and gets a reply", async () => {
  const { guest, host, next, close } = pair();
  let reloads = 0;
  guest.listen("experimental.DataReloaded", () => { reloads++; });
  host.postMessage(JSON.stringify({ type: "experimental.DataReloaded", id: 7, payload: null, error: null, isReply: false }));
  const got = await next(1);
  assert.equal(reloads, 1);
  assert.deepEqual(got[0], { type: "experimental.DataReloaded", id: 7, payload: null, error: null, isReply: true });
  close();
});

test("unknown messages are answered too; listener errors travel in the reply", async () => {
  const { guest, host, next, close } = pair();
  guest.listen("boom", () => { throw new Error("nope"); });
  host.postMessage(JSON.stringify({ type: "experimental.Unknown", id: 1, payload: 3, error: null, isReply: false }));
  host.postMessage(JSON.stringify({ type: "boom", id: 2, payload: null, error: null, isReply: false }));
  host.postMessage("not json at all");
  const got = await next(2);
  assert.equal(got.length, 2);
  assert.equal(got[0].isReply, true);
  assert.equal(got[0].id, 1);
  assert.equal(got[1].error, "nope");
  close();
});

test("send() resolves with the host's reply payload, rejects on its error", async () => {
  const { guest, host, close } = pair();
  host.on("message", (data: string) => {
    const m = JSON.parse(data);
    if (m.isReply) return;
    const reply = m.type === "experimental.GetRuns"
      ? { ...m, payload: ["a", "b"], isReply: true }
      : { ...m, payload: null, error: "no such message", isReply: true };
    host.postMessage(JSON.stringify(reply));
  });
  assert.deepEqual(await guest.send("experimental.GetRuns"), ["a", "b"]);
  await assert.rejects(guest.send("experimental.Nope"), /no such message/);
  close();
});

test("parseMessage validates the shape", () => {
  assert.throws(() => parseMessage({ type: "x" }), /not a string/);
  assert.throws(() => parseMessage('{"id": 1}'), /malformed/);
  assert.deepEqual(parseMessage('{"type":"t","id":0}'), { type: "t", id: 0, payload: null, error: null, isReply: false });
});

test("helpers: filters, run colors, file names, queries, TensorBoard JSON", () => {
  assert.ok(compileFilter("dense|head") instanceof RegExp);
  assert.equal(compileFilter("  "), null);
  assert.ok(compileFilter("dense(") instanceof Error);
  assert.equal(runColor("lr_0.1/train"), runColor("lr_0.1/train"));
  assert.match(runColor("x"), /^#[0-9a-f]{6}$/);
  const names = ["lr_0.1/train", "lr_0.0003/train", "c", "d"];
  assert.equal(new Set(names.map((n) => runColorOf(n, names))).size, 4, "distinct colors for a few runs");
  assert.equal(runColorOf("c", names), runColorOf("c", [...names].reverse()), "independent of the listing order");
  assert.equal(safeFileName("lr_0.1/train"), "lr_0.1_train");
  assert.equal(safeFileName("../.."), "run");
  assert.equal(query({ run: ["a/b", "c&d"], columns: 10, start: undefined }), "run=a%2Fb&run=c%26d&columns=10");
  const parsed = parseJsonNumbers('{"v": ["NaN", "Infinity", "-Infinity", 1.5]}') as { v: number[] };
  assert.ok(Number.isNaN(parsed.v[0]));
  assert.deepEqual(parsed.v.slice(1), [Infinity, -Infinity, 1.5]);
});
