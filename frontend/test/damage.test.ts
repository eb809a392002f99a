import { test } from "node:test";
import assert from "node:assert/strict";
import type { RunInfo } from "../src/api";
import { damagedOf, damageLines, damageTitle } from "../src/damage";

const run = (damaged: unknown) => ({ run: "r", first_step: 0, last_step: 9, has_learning_rate: false, layers: [], damaged }) as unknown as RunInfo;

test("damaged: the run's stretches; none when whole, not checked (null) or from an older backend", () => {
  const stretch = { file: "events.out.tfevents.1", unread_bytes: 89, after_step: 13, offset: 1495, cut_short: false };
  assert.deepEqual(damagedOf(run([stretch])), [stretch]);
  assert.deepEqual(damagedOf(run([])), []);
  assert.deepEqual(damagedOf(run(null)), []);
  assert.deepEqual(damagedOf(run(undefined)), []);
  assert.deepEqual(damagedOf(undefined), []);
});

test("damage lines: the report's words", () => {
  assert.deepEqual(damageLines([
    { file: "f1", unread_bytes: 89, after_step: 13, offset: 1495, cut_short: false },
    { file: "f1", unread_bytes: 64, after_step: null, offset: 0 },
    { file: "f2", unread_bytes: 9, after_step: 30, offset: 3000, cut_short: true },
    { file: "f3", unread_bytes: 40, after_step: 2 },
  ]), [
    "f1: 89 bytes unreadable from offset 1495 (after step 13)",
    "f1: 64 bytes unreadable from offset 0 (before any step)",
    "f2: 9 bytes unreadable from offset 3000 (after step 30): the file ends inside its last record, one record cut short (normal after a crash; or the record is still being written)",
    "f3: 40 bytes unreadable (after step 2)",
  ]);
});

test("damage title: a cut-short last record is told apart from lost data", () => {
  assert.match(damageTitle([{ file: "f", unread_bytes: 9, after_step: 3, cut_short: true }]), /^The last record of 1 event file is cut short \(normal after a crash\)/);
  assert.match(damageTitle([
    { file: "f", unread_bytes: 9, after_step: 3, cut_short: true },
    { file: "g", unread_bytes: 89, after_step: 3, cut_short: false },
    { file: "g", unread_bytes: 89, after_step: 9, cut_short: false },
  ]), /^Damaged data in 2 event files: /);
});
