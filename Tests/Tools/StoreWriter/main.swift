import Foundation
import TermindKernel
import TermindStore

// Test peer: `termind-test-store-writer DB WRITER COUNT [--slow]` inserts COUNT rows, one
// transaction each, into a table shared with other writer processes, printing each
// committed sequence number so a test can kill it mid-way and check nothing committed
// was lost.
let arguments = CommandLine.arguments
guard arguments.count >= 4, let count = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: termind-test-store-writer DB WRITER COUNT [--slow]\n".utf8))
    exit(2)
}
do {
    let database = try StoreAccess.database(path: arguments[1])
    try database.migrate(Schema(feature: "torture", migrations: [
        Migration(1, "rows", "CREATE TABLE rows (writer TEXT NOT NULL, sequence INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (writer, sequence));"),
    ]))
    let payload = Data(repeating: 0xAB, count: 4096)
    for sequence in 0..<count {
        try database.transaction {
            try database.execute("INSERT INTO rows (writer, sequence, payload) VALUES (?, ?, ?)", [arguments[2], sequence, payload])
        }
        // Unbuffered: the line is out before the next row starts.
        FileHandle.standardOutput.write(Data("\(sequence)\n".utf8))
        if arguments.contains("--slow") { usleep(2_000) }
    }
} catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(1)
}
