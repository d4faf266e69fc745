// Writes the parquet files that data/parquet reads, with a real parquet writer: parquet-wasm,
// the Rust arrow implementation's parquet writer compiled to WebAssembly (npm registry).
//   cd test/data/parquet && npm ci && node make_fixtures.mjs
// The files and expected.json (each file's rows, null for a null) are committed; run this
// again only to change them. Node 18 or later.
import { writeFileSync } from "node:fs";
import * as arrow from "apache-arrow";
import * as pq from "parquet-wasm";

// Rows like nanochat's documents: text of many lengths (some longer than a data page), unicode,
// repeated rows (so that the dictionary is used), empty strings and nulls.
function rows(n, seed) {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
  const words = ["kernel", "Ringpuffer", "données", "файл", "数据", "🙂", "tab\tand\nnewline", "x"];
  const out = [];
  for (let i = 0; i < n; i++) {
    if (i % 17 === 5) { out.push(null); continue; }
    if (i % 23 === 7) { out.push(""); continue; }
    if (i % 5 === 0) { out.push(`repeated row ${i % 3}`); continue; }
    const len = i % 41 === 0 ? 900 : Math.floor(rand() * 60) + 1;  // 900 words: past a data page
    const parts = [];
    for (let w = 0; w < len; w++) parts.push(words[Math.floor(rand() * words.length)]);
    out.push(`${i}: ${parts.join(" ")}`);
  }
  return out;
}

function table(texts, nullable) {
  const text = arrow.vectorFromArray(texts, new arrow.Utf8());
  const id = arrow.vectorFromArray(texts.map((_, i) => i), new arrow.Int32());
  const schema = new arrow.Schema([new arrow.Field("id", new arrow.Int32(), false), new arrow.Field("text", new arrow.Utf8(), nullable)]);
  const data = arrow.makeData({ type: new arrow.Struct(schema.fields), length: texts.length, nullCount: 0,
                                children: [id.data[0], text.data[0]] });
  return new arrow.Table(schema, new arrow.RecordBatch(schema, data));
}

const cases = [
  // name, rows, compression, writer version, dictionary, rows per row group, data page bytes
  ["snappy_v1_dictionary", rows(300, 1), pq.Compression.SNAPPY, pq.WriterVersion.V1, true, 64, 1 << 20, true],
  ["zstd_v2_dictionary", rows(300, 2), pq.Compression.ZSTD, pq.WriterVersion.V2, true, 100, 4096, true],
  ["uncompressed_v1_plain_pages", rows(200, 3), pq.Compression.UNCOMPRESSED, pq.WriterVersion.V1, false, 80, 2048, true],
  ["gzip_v2_plain", rows(150, 4), pq.Compression.GZIP, pq.WriterVersion.V2, false, 70, 4096, true],
  ["zstd_v1_required", rows(120, 5).map((t) => t ?? "was null"), pq.Compression.ZSTD, pq.WriterVersion.V1, true, 50, 1 << 20, false],
];
const expected = {};
for (const [name, texts, compression, version, dictionary, group, page, nullable] of cases) {
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(compression).setWriterVersion(version).setDictionaryEnabled(dictionary)
    .setMaxRowGroupSize(group).setDataPageSizeLimit(page).build();
  const ipc = arrow.tableToIPC(table(texts, nullable), "stream");
  writeFileSync(`${name}.parquet`, pq.writeParquet(pq.Table.fromIPCStream(ipc), props));
  expected[name] = texts;
}
writeFileSync("expected.json", JSON.stringify(expected, null, 1) + "\n");
console.log(`wrote ${cases.length} files`);
