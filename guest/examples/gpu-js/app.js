// A WASI 0.2 command component in JavaScript on `tensorwasm:gpu`, made by
// jco componentize (componentize-js, StarlingMonkey;
// guest/examples/build-lang-components.sh): the MLP of the Rust guest
// (guest/examples/gpu-component), in the same two modes.
//
// - `mlp [SEED]` (the default): `softmax(relu(x W1 + b1) W2 + b2)` on device
//   buffers with the built-in ops (GEMM, bias add, ReLU, softmax), checked
//   against the same computation in plain JavaScript; inputs from SEED
//   (printed) by the Rust guest's generator, so one seed is one model in
//   every language.
// - `mlp-file PATH`: the same pass on the model in PATH, a file in a
//   preopened directory in the Rust guest's format (its `write-model`).
//
// Prints `mlp ok: ...` and the largest error, or what differs (exit code 1).
// u64 arguments are BigInts, as the bindings have them.

import { Buffer } from 'tensorwasm:gpu/buffers@0.1.2';
import * as tensorOps from 'tensorwasm:gpu/tensor-ops@0.1.2';
import { getArguments } from 'wasi:cli/environment@0.2.12';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const MASK64 = (1n << 64n) - 1n;
const f32 = Math.fround;
// What releases a resource handle in the bindings (the engine may predate
// `Symbol.dispose`).
const dispose = Symbol.dispose ?? Symbol.for('dispose');

/** What the guest prints on stderr before it exits with code 1. */
class Failure extends Error {}

/** A failed call's `types.error` as one line, as the Rust guest has it. */
function describe(e) {
  const error = e?.payload ?? e;
  if (error?.code === undefined) {
    return String(e);
  }
  const code = error.code[0].toUpperCase() + error.code.slice(1);
  return `ErrorCode::${code}: ${error.message}`;
}

/** `x`, an f32, as Rust's `{:e}` writes it: the fewest digits that read
 * back as the same f32. */
function f32Text(x) {
  let text = x.toExponential(0);
  for (let digits = 0; digits < 9; digits++) {
    text = x.toExponential(digits);
    if (f32(Number(text)) === x) {
      break;
    }
  }
  const [mantissa, exponent] = text.split('e');
  const trimmed = mantissa.includes('.') ? mantissa.replace(/0+$/, '').replace(/\.$/, '') : mantissa;
  return `${trimmed}e${Number(exponent)}`;
}

/** How many values x, w1, b1, w2 and b2 hold. */
function lens(batch, inputs, hidden, outputs) {
  return [batch * inputs, inputs * hidden, hidden, hidden * outputs, outputs];
}

/** The MLP's sizes and values: x [batch, inputs], w1 [inputs, hidden],
 * b1 [hidden], w2 [hidden, outputs], b2 [outputs], every value an f32. */
class Model {
  constructor([batch, inputs, hidden, outputs], [x, w1, b1, w2, b2]) {
    Object.assign(this, { batch, inputs, hidden, outputs, x, w1, b1, w2, b2 });
  }

  /** Values in ±[0.05, 1), never zero, at odd sizes: the Rust guest's
   * xorshift64 and f32 arithmetic, step for step. */
  static random(seed) {
    let state = (seed | 1n) & MASK64;
    const value = () => {
      state ^= (state << 13n) & MASK64;
      state ^= state >> 7n;
      state ^= (state << 17n) & MASK64;
      const unit = Number(state >> 40n) / 2 ** 24;
      const magnitude = f32(f32(0.05) + f32(f32(0.95) * unit));
      return (state & 1n) === 0n ? magnitude : -magnitude;
    };
    const sizes = [5, 37, 67, 10];
    return new Model(
      sizes,
      lens(...sizes).map((n) => Array.from({ length: n }, value)),
    );
  }

  /** A model from its file form: the four sizes as u32, then x, w1, b1,
   * w2, b2 as f32, all little-endian. */
  static decode(file) {
    if (file.length < 16) {
      throw new Failure('the file is too short');
    }
    const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
    const sizes = [0, 1, 2, 3].map((i) => view.getUint32(4 * i, true));
    const count = Math.floor((file.length - 16) / 4);
    const want = lens(...sizes).reduce((a, b) => a + b, 0);
    if (count !== want) {
      const [b, i, h, o] = sizes;
      throw new Failure(`the file holds ${count} values; sizes ${b} x ${i} -> ${h} -> ${o} need ${want}`);
    }
    let at = 16;
    const parts = lens(...sizes).map((n) =>
      Array.from({ length: n }, () => {
        const v = view.getFloat32(at, true);
        at += 4;
        return v;
      }),
    );
    return new Model(sizes, parts);
  }

  /** The forward pass in JavaScript's numbers (f64), summed in the order
   * the Rust guest sums. */
  forwardCpu() {
    const { batch: b, inputs: i, hidden: h, outputs: o } = this;
    const hidden = new Float64Array(b * h);
    for (let r = 0; r < b; r++) {
      for (let c = 0; c < h; c++) {
        let dot = 0;
        for (let k = 0; k < i; k++) {
          dot += this.x[r * i + k] * this.w1[k * h + c];
        }
        hidden[r * h + c] = Math.max(dot + this.b1[c], 0);
      }
    }
    const y = [];
    for (let r = 0; r < b; r++) {
      const logits = [];
      for (let c = 0; c < o; c++) {
        let dot = 0;
        for (let k = 0; k < h; k++) {
          dot += hidden[r * h + k] * this.w2[k * o + c];
        }
        logits.push(dot + this.b2[c]);
      }
      const top = Math.max(...logits);
      const exps = logits.map((l) => Math.exp(l - top));
      let total = 0;
      for (const e of exps) {
        total += e;
      }
      for (const e of exps) {
        y.push(f32(e / total));
      }
    }
    return y;
  }

  /** The forward pass on the device: every op queued, only the last one
   * waited for (the stream runs them in order). */
  forwardGpu() {
    const [b, i, h, o] = [this.batch, this.inputs, this.hidden, this.outputs].map(BigInt);
    const held = [];
    const output = (n) => {
      const buffer = Buffer.alloc(4n * BigInt(n));
      held.push(buffer);
      return buffer;
    };
    const upload = (values) => {
      const buffer = output(values.length);
      buffer.write(0n, new Uint8Array(new Float32Array(values).buffer));
      return buffer;
    };
    const tensor = (buffer, shape) => ({ buffer, offset: 0n, dtype: 'f32', shape, strides: [] });
    try {
      const [x, w1, b1, w2, b2] = [this.x, this.w1, this.b1, this.w2, this.b2].map(upload);
      const [pre, act] = [output(this.batch * this.hidden), output(this.batch * this.hidden)];
      const [logits, biased, y] = [0, 1, 2].map(() => output(this.batch * this.outputs));
      // Launches dropped unwaited keep running: the host holds what they
      // use until they have finished.
      queued(tensorOps.gemm(tensor(x, [b, i]), tensor(w1, [i, h]), tensor(pre, [b, h]), 1, 0, false));
      queued(tensorOps.add(tensor(pre, [b, h]), tensor(b1, [h]), tensor(act, [b, h])));
      queued(tensorOps.relu(tensor(act, [b, h]), tensor(pre, [b, h])));
      queued(tensorOps.gemm(tensor(pre, [b, h]), tensor(w2, [h, o]), tensor(logits, [b, o]), 1, 0, false));
      queued(tensorOps.add(tensor(logits, [b, o]), tensor(b2, [o]), tensor(biased, [b, o])));
      const last = tensorOps.softmax(tensor(biased, [b, o]), tensor(y, [b, o]));
      last.wait();
      last[dispose]();
      const bytes = y.read(0n, 4 * this.batch * this.outputs);
      return Array.from(new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)));
    } finally {
      for (const buffer of held) {
        buffer[dispose]();
      }
    }
  }
}

/** Drops `launch` without waiting for it: it runs on. */
function queued(launch) {
  launch[dispose]();
}

/** Runs `model` on the device and in JavaScript and compares; the summary
 * line, or what differs. */
function mlp(model) {
  let gpu;
  try {
    gpu = model.forwardGpu();
  } catch (e) {
    throw new Failure(`mlp: ${describe(e)}`);
  }
  const cpu = model.forwardCpu();
  let worst = 0;
  for (let n = 0; n < Math.min(gpu.length, cpu.length); n++) {
    const [g, c] = [gpu[n], cpu[n]];
    const error = Math.abs(f32(g - c));
    if (Number.isNaN(error) || error > 1e-5 + 1e-4 * Math.abs(c)) {
      throw new Failure(`mlp: output ${n} is ${g}, the CPU says ${c} (error ${error})`);
    }
    worst = Math.max(worst, error);
  }
  if (gpu.length !== cpu.length) {
    throw new Failure(`mlp: ${gpu.length} outputs, ${cpu.length} expected`);
  }
  console.log(
    `mlp ok: batch ${model.batch}, ${model.inputs} -> ${model.hidden} -> ${model.outputs}, ` +
      `largest error ${f32Text(worst)}`,
  );
}

/** The whole of the file at `path`, through the preopened directory whose
 * guest path holds it. */
function readFile(path) {
  const dirs = getDirectories()
    .filter(([, name]) => name === '/' || path === name || path.startsWith(`${name.replace(/\/$/, '')}/`))
    .sort(([, a], [, b]) => b.length - a.length);
  if (dirs.length === 0) {
    throw new Failure(`cannot read ${path}: no preopened directory holds it`);
  }
  const [dir, name] = dirs[0];
  const relative = path.slice(name.length).replace(/^\/+/, '') || '.';
  try {
    const file = dir.openAt({ symlinkFollow: true }, relative, {}, { read: true });
    try {
      const size = Number(file.stat().size);
      const data = new Uint8Array(size);
      let at = 0;
      while (at < size) {
        const [chunk, end] = file.read(BigInt(size - at), BigInt(at));
        data.set(chunk, at);
        at += chunk.length;
        if (end || chunk.length === 0) {
          break;
        }
      }
      return data.subarray(0, at);
    } finally {
      file[dispose]();
    }
  } catch (e) {
    throw new Failure(`cannot read ${path}: ${e?.payload ?? e}`);
  }
}

function main(args) {
  const mode = args[1] ?? 'mlp';
  if (mode === 'mlp') {
    const seed = args[2] === undefined ? 0x5eedn : BigInt(args[2]);
    console.log(`seed ${seed}`);
    mlp(Model.random(seed));
  } else if (mode === 'mlp-file') {
    const path = args[2];
    if (path === undefined) {
      throw new Failure('mlp-file PATH');
    }
    const file = readFile(path);
    let model;
    try {
      model = Model.decode(file);
    } catch (e) {
      throw new Failure(`${path}: ${e.message}`);
    }
    mlp(model);
  } else {
    throw new Failure(`unknown mode ${mode}`);
  }
}

/** The command's `wasi:cli/run`: a failure is `err`, exit code 1. */
export const run = {
  run() {
    try {
      main(getArguments());
    } catch (e) {
      console.error(e instanceof Failure ? e.message : `${e}`);
      // The bindings make a thrown value with a `payload` the result's
      // `err`, and rethrow any other Error as a trap.
      throw { payload: undefined };
    }
  },
};
