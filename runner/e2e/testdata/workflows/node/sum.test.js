const test = require("node:test");
const assert = require("node:assert");
test("sum", () => { assert.strictEqual(1 + 2, 3); });
