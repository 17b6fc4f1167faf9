import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// What a C plugin's contracts and libffi functions may hand back, and how each mistake is
/// reported: 64-bit integers both ways, replies the host cannot use, status codes, request
/// and response schemas declared in the manifest. One plugin, compiled here with `cc`.
final class PluginContractTests: XCTestCase {
    static let source = #"""
    #include "termind_plugin.h"
    #include <math.h>
    #include <stdlib.h>
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    static const termind_host_api *host;
    static char *copy_string(const char *s) { size_t n = strlen(s) + 1; char *c = host->alloc(n); memcpy(c, s, n); return c; }

    uint64_t echo_u64(uint64_t v) { return v; }
    int64_t echo_i64(int64_t v) { return v; }
    uint64_t max_u64(void) { return UINT64_MAX; }
    int64_t min_i64(void) { return INT64_MIN; }
    double not_a_number(void) { return NAN; }
    double infinite(void) { return INFINITY; }
    const char *bad_utf8(void) { return "caf\xC3"; }
    const char *nothing(void) { return NULL; }
    static int touched;
    void touch(void) { touched++; }
    int32_t touches(void) { return touched; }

    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        if (strcmp(contract, "shapes.echo@1") == 0) { *reply = copy_string(request); return TERMIND_OK; }
        if (strcmp(contract, "shapes.big@1") == 0) {
            size_t n = (4u << 20) + 16;
            char *big = host->alloc(n + 1);
            big[0] = '"'; memset(big + 1, 'a', n - 2); big[n - 1] = '"'; big[n] = 0;
            *reply = big;
            return TERMIND_OK;
        }
        if (strcmp(contract, "shapes.empty@1") == 0) { *reply = NULL; return TERMIND_OK; }
        if (strcmp(contract, "shapes.latin1@1") == 0) { *reply = copy_string("\"caf\xE9\""); return TERMIND_OK; }
        if (strcmp(contract, "shapes.unknown@1") == 0) { return TERMIND_ERR_UNKNOWN; }
        if (strcmp(contract, "shapes.odd@1") == 0) { *reply = copy_string("odd"); return 42; }
        if (strcmp(contract, "shapes.typed@1") == 0) {
            char *name = host->json_string_field(request, "name");
            int wrong = name != NULL && strcmp(name, "wrong") == 0;
            host->free(name);
            *reply = copy_string(wrong ? "{\"greeting\": 7}" : "{\"greeting\": \"hello\"}");
            return TERMIND_OK;
        }
        *reply = copy_string("not this one");
        return TERMIND_ERR_FAILED;
    }
    /* Past the declared size: a host that read it anyway would find a function that aborts. */
    static int beyond_size(const char *n, const char *r, size_t l, void *s, char **reply) { (void)n; (void)r; (void)l; (void)s; (void)reply; abort(); }
    static const termind_plugin_descriptor descriptor = {
        /* As a plugin built before streams: its descriptor ends before handle_stream. */
        offsetof(termind_plugin_descriptor, handle_stream), TERMIND_PLUGIN_ABI_VERSION, "shapes", "1.0.0", NULL, NULL, handle, beyond_size
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
    """#

    static let manifest = #"""
    {"id": "shapes", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libshapes.so",
     "contracts": ["shapes.echo@1", "shapes.big@1", "shapes.empty@1", "shapes.latin1@1", "shapes.unknown@1", "shapes.odd@1",
                   "shapes.typed@1", "shapes.failed@1"],
     "streams": ["shapes.stream@1"],
     "schemas": {"shapes.typed@1": {
        "request": {"type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}}, "required": ["name"]},
        "response": {"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"]}}},
     "functions": [
        {"name": "echo-u64", "symbol": "echo_u64", "signature": "uint64(uint64)"},
        {"name": "echo-i64", "symbol": "echo_i64", "signature": "int64(int64)"},
        {"name": "max-u64", "symbol": "max_u64", "signature": "uint64()"},
        {"name": "min-i64", "symbol": "min_i64", "signature": "int64(void)"},
        {"name": "nan", "symbol": "not_a_number", "signature": "double()"},
        {"name": "inf", "symbol": "infinite", "signature": "double()"},
        {"name": "bad-utf8", "symbol": "bad_utf8", "signature": "string()"},
        {"name": "nothing", "symbol": "nothing", "signature": "string()"},
        {"name": "touch", "symbol": "touch", "signature": "void(void)"},
        {"name": "touches", "symbol": "touches", "signature": "int32()"}
     ]}
    """#

    private var directory: TemporaryDirectory!
    private var kernel: Kernel!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        try CPluginCompiler.build(source: Self.source, folder: directory.file("plugins/shapes"), name: "shapes", manifest: Self.manifest)
        kernel = Kernel(configuration: KernelConfiguration(registryPath: nil, pluginDirectories: [directory.file("plugins")]), sink: .disabled())
        let statuses = try await kernel.boot()
        let problems = await kernel.unattributed
        XCTAssertEqual(statuses.first?.state, .running, statuses.first?.reason ?? "\(problems)")
    }

    override func tearDown() async throws {
        await kernel?.shutdown()
        directory?.remove()
    }

    private func call(_ contract: String, _ body: String) async throws -> JSONValue {
        try JSONCoding.parse(try await kernel.call(contract, body: Data(body.utf8)), source: "reply")
    }

    private func failure(_ contract: String, _ body: String = "{}") async -> TermindError? {
        do {
            _ = try await kernel.call(contract, body: Data(body.utf8))
            return nil
        } catch {
            return error as? TermindError
        }
    }

    func testLibffiKeepsTheFull64BitRangeBothWays() async throws {
        for value in ["0", "9223372036854775807", "9223372036854775808", "18446744073709551615"] {
            let reply = try await kernel.call("shapes.fn.echo-u64@1", body: Data(#"{"args": [\#(value)]}"#.utf8))
            XCTAssertEqual(String(decoding: reply, as: UTF8.self), #"{"result":\#(value)}"#)
        }
        for value in ["-9223372036854775808", "-1", "9223372036854775807"] {
            let reply = try await kernel.call("shapes.fn.echo-i64@1", body: Data(#"{"args": [\#(value)]}"#.utf8))
            XCTAssertEqual(String(decoding: reply, as: UTF8.self), #"{"result":\#(value)}"#)
        }
        let max = try await call("shapes.fn.max-u64@1", #"{"args": []}"#)
        XCTAssertEqual(max["result"], .unsignedInteger(UInt64.max))
        let min = try await call("shapes.fn.min-i64@1", "{}")
        XCTAssertEqual(min["result"], .integer(Int64.min), "a function without parameters needs no args")
        let tooBig = await failure("shapes.fn.echo-i64@1", #"{"args": [9223372036854775808]}"#)
        XCTAssertEqual(tooBig?.message, "function 'echo-i64' argument 1: 9223372036854775808 does not fit int64.")
        let negative = await failure("shapes.fn.echo-u64@1", #"{"args": [-1]}"#)
        XCTAssertEqual(negative?.message, "function 'echo-u64' argument 1: -1 does not fit uint64.")
    }

    func testVoidFunctionsAndResultsJSONCannotCarry() async throws {
        let value1 = try await call("shapes.fn.touch@1", "{}")
        XCTAssertEqual(value1["result"], .null)
        let value2 = try await call("shapes.fn.touch@1", #"{"args": []}"#)
        XCTAssertEqual(value2["result"], .null)
        let value3 = try await call("shapes.fn.touches@1", "{}")
        XCTAssertEqual(value3["result"], .integer(2))
        let value4 = try await call("shapes.fn.nothing@1", "{}")
        XCTAssertEqual(value4["result"], .null, "a NULL string is null")
        for (name, detail) in [("nan", "returned nan, which JSON cannot represent"), ("inf", "returned inf, which JSON cannot represent"),
                               ("bad-utf8", "returned a string that is not valid UTF-8 (byte 3)")] {
            let error = await failure("shapes.fn.\(name)@1")
            XCTAssertEqual(error?.code, "plugin.bad_reply", name)
            XCTAssertEqual(error?.message, "plugin 'shapes': function '\(name)' (shapes.fn.\(name)@1) \(detail).")
        }
    }

    /// The plugin's descriptor ends before handle_stream (as one built before streams): the
    /// host must not read past its size, where a function that aborts is waiting.
    func testAStreamOfAPluginBuiltBeforeStreamsIsRefusedWithoutReadingPastItsDescriptor() async throws {
        do {
            _ = try await kernel.runStream("shapes.stream@1", body: Data("{}".utf8)) { _ in nil }
            XCTFail("the plugin serves no stream")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "plugin.unhandled")
            XCTAssertTrue(error.message.contains("has no handle_stream"), error.message)
        }
    }

    func testRepliesTheHostCannotUseAreNamedWithThePluginAndContract() async throws {
        let cases: [(String, String, String)] = [
            ("shapes.big@1", "plugin.bad_reply", "The reply of plugin 'shapes' to shapes.big@1 is larger than 4194304 bytes (the reply bound)."),
            ("shapes.empty@1", "plugin.bad_reply", "plugin 'shapes' returned TERMIND_OK for shapes.empty@1 without a reply (set *reply to a JSON value)."),
            ("shapes.latin1@1", "plugin.bad_reply", "The reply of plugin 'shapes' to shapes.latin1@1 is not valid UTF-8 (byte 4)."),
            ("shapes.unknown@1", "plugin.unhandled", "plugin 'shapes' answered TERMIND_ERR_UNKNOWN for shapes.unknown@1, which its manifest declares: the plugin does not handle it."),
            ("shapes.odd@1", "plugin.failed", "plugin 'shapes' failed on shapes.odd@1 with status 42, which is not a TERMIND_* code: odd."),
            ("shapes.failed@1", "plugin.failed", "plugin 'shapes' failed on shapes.failed@1: not this one."),
        ]
        for (contract, code, message) in cases {
            let error = await failure(contract)
            XCTAssertEqual(error?.code, code, contract)
            XCTAssertEqual(error?.message, message, contract)
        }
    }

    func testRequestsAreJSONObjectsAndDeclaredSchemasAreEnforcedBothWays() async throws {
        // Without a schema: any object, nothing else.
        let value5 = try await call("shapes.echo@1", #"{"a": [1, 2]}"#)
        XCTAssertEqual(value5, .object(["a": .array([.integer(1), .integer(2)])]))
        for body in [#""x""#, "[1,2]", "42", "null"] {
            let error = await failure("shapes.echo@1", body)
            XCTAssertEqual(error?.code, "request.invalid", body)
            XCTAssertTrue(error?.message.hasPrefix("Invalid request for shapes.echo@1: body: expected object, got") ?? false, "\(body): \(error?.message ?? "")")
        }
        // With one: fields are checked before the plugin runs, the reply after.
        let value6 = try await call("shapes.typed@1", #"{"name": "Ada"}"#)
        XCTAssertEqual(value6, .object(["greeting": .string("hello")]))
        let missing = await failure("shapes.typed@1", #"{"count": "two"}"#)
        XCTAssertEqual(missing?.message, "Invalid request for shapes.typed@1: body.count: expected integer, got string; body.name: required field is missing.")
        let unknown = await failure("shapes.typed@1", #"{"name": "a", "nmae": "b"}"#)
        XCTAssertTrue(unknown?.message.contains("body.nmae: unknown field") ?? false, unknown?.message ?? "")
        let wrongReply = await failure("shapes.typed@1", #"{"name": "wrong"}"#)
        XCTAssertEqual(wrongReply?.code, "plugin.bad_reply")
        XCTAssertEqual(wrongReply?.message, "The reply of plugin 'shapes' to shapes.typed@1 does not match the response schema in its manifest: body.greeting: expected string, got integer.")
        // The schemas are exported like a Swift contract's.
        let info = try XCTUnwrap(kernel.contractInfos(prefix: "shapes.typed").first)
        XCTAssertEqual(info.request["required"], .array([.string("name")]))
        XCTAssertEqual(info.response["properties"]?["greeting"]?["type"], .string("string"))
        XCTAssertEqual(kernel.contractInfos(prefix: "shapes.echo").first?.request, .object(["type": .string("object"), "additionalProperties": .object([:])]))
    }
}
