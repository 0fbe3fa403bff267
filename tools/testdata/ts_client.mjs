// A second, independent MCP client: the official TypeScript SDK. It lists
// the tools of the endpoint in argv[2], calls fetch with each URL after it,
// and prints what it got as one JSON line (tools_ts_test.go reads it).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, ...urls] = process.argv.slice(2);
const client = new Client({ name: "egressd-ts-test", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)));
const listed = await client.listTools();
const out = { tools: listed.tools.map((t) => t.name), calls: [] };
for (const url of urls) {
  const r = await client.callTool({ name: "fetch", arguments: { url } });
  out.calls.push({ url, isError: !!r.isError, text: r.content.map((c) => c.text ?? "").join("") });
}
console.log(JSON.stringify(out));
await client.close();
