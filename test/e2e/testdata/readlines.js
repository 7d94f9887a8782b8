// readlines.js is an independent reader of tablekeeper's JSON-lines parts:
// it knows nothing of the Go code that wrote them.
//
//   node readlines.js DIR
//
// For every file of DIR (in name order; *.gz files are gunzipped) it checks
// that the bytes are valid UTF-8 and end with "\n", JSON.parse-s each line,
// checks that each holds a string PartitionKey and RowKey and that every
// annotated value has the form its EDM type requires (Int64 as a decimal
// string that BigInt reads back exactly, DateTime with seven fractional
// digits, Guid, base64 Binary, Double as a number or NaN/Infinity), and
// prints one JSON object on stdout:
//
//   {"files":{"000001.jsonl":12,...},"lines":N,
//    "types":{"Edm.Int64":n,...},"entities":[<each line, parsed>...]}
//
// Any failure is printed on stderr with the file and line, exit status 1.
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const checks = {
  'Edm.Int64': (v) => typeof v === 'string' && /^-?\d+$/.test(v) && BigInt(v).toString() === v &&
    BigInt(v) >= -(2n ** 63n) && BigInt(v) < 2n ** 63n,
  'Edm.DateTime': (v) => typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$/.test(v),
  'Edm.Guid': (v) => typeof v === 'string' && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(v),
  'Edm.Binary': (v) => typeof v === 'string' && Buffer.from(v, 'base64').toString('base64') === v,
  'Edm.Double': (v) => typeof v === 'number' || v === 'NaN' || v === 'Infinity' || v === '-Infinity',
  'Edm.String': (v) => typeof v === 'string',
  'Edm.Boolean': (v) => typeof v === 'boolean',
  'Edm.Int32': (v) => Number.isInteger(v),
};

function main() {
  const dir = process.argv[2];
  const decoder = new TextDecoder('utf-8', { fatal: true });
  const out = { files: {}, lines: 0, types: {}, entities: [] };
  for (const name of fs.readdirSync(dir).sort()) {
    let buf = fs.readFileSync(path.join(dir, name));
    if (name.endsWith('.gz')) {
      buf = zlib.gunzipSync(buf);
    }
    const text = decoder.decode(buf);
    if (!text.endsWith('\n')) {
      throw new Error(`${name}: does not end with a newline`);
    }
    const lines = text.slice(0, -1).split('\n');
    lines.forEach((line, i) => {
      const where = `${name}:${i + 1}`;
      let obj;
      try {
        obj = JSON.parse(line);
      } catch (e) {
        throw new Error(`${where}: ${e.message}`);
      }
      if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
        throw new Error(`${where}: not a JSON object`);
      }
      if (typeof obj.PartitionKey !== 'string' || typeof obj.RowKey !== 'string') {
        throw new Error(`${where}: no string PartitionKey and RowKey`);
      }
      for (const [key, type] of Object.entries(obj)) {
        if (!key.endsWith('@odata.type')) {
          continue;
        }
        const prop = key.slice(0, -'@odata.type'.length);
        const check = checks[type];
        if (!check) {
          throw new Error(`${where}: ${prop}: unknown type ${type}`);
        }
        if (!(prop in obj) || !check(obj[prop])) {
          throw new Error(`${where}: ${prop}: ${JSON.stringify(obj[prop])} is not a valid ${type}`);
        }
        out.types[type] = (out.types[type] || 0) + 1;
      }
      out.entities.push(obj);
    });
    out.files[name] = lines.length;
    out.lines += lines.length;
  }
  process.stdout.write(JSON.stringify(out));
}

try {
  main();
} catch (e) {
  process.stderr.write(`readlines: ${e.message}\n`);
  process.exit(1);
}
