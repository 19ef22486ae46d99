// A JavaScript CPU burner at a known 70:30 split: hotA does 70 units of
// work for every 30 of hotB, until argv[2] seconds have passed; "ready" on
// stdout once in the loop. Run with --perf-basic-prof (V8 writes
// /tmp/perf-PID.map) and --no-turbo-inlining (each function keeps a frame).
"use strict";

function spin(n) {
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc = (acc * 31 + i) | 0;
  }
  return acc;
}

function hotA(n) {
  return spin(n);
}

function hotB(n) {
  return spin(n);
}

const seconds = Number(process.argv[2] || 10);
const end = Date.now() + seconds * 1000;
let sink = 0;
let ready = false;
while (Date.now() < end) {
  for (let round = 0; round < 100; round++) {
    sink ^= hotA(7000);
    sink ^= hotB(3000);
  }
  if (!ready) {
    console.log("ready");
    ready = true;
  }
}
console.log(sink === 42 ? "" : "done");
