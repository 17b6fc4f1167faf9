@testable import TermindSSH
import XCTest

/// A channel's life, driven directly: every transition of the machine the channel and bridge
/// pumps perform, without a socket or an engine.
final class ChannelLifecycleTests: XCTestCase {
    typealias Machine = ChannelLifecycle

    /// Runs the close handshake to its end, every call succeeding; the actions in order.
    private func handshake(_ machine: inout Machine, serverEOF: Bool = false) -> [Machine.Action] {
        var actions: [Machine.Action] = []
        while true {
            let action = machine.nextAction(lanePending: false, serverEOF: serverEOF)
            guard action != .none else { return actions }
            actions.append(action)
            machine.completed(action, .done)
            XCTAssertLessThan(actions.count, 10, "the handshake does not end: \(actions)")
            if actions.count >= 10 { return actions }
        }
    }

    func testACommandThatEndsItsOutputClosesWithoutAHangUpAndIsFreedAfterTheServersClose() {
        var machine = Machine(.session(hangup: "TERM"))
        XCTAssertTrue(machine.wantsToSendEOF(inputDone: true))
        machine.eofSending(.done)
        XCTAssertFalse(machine.wantsToSendEOF(inputDone: true), "EOF goes out once")
        XCTAssertTrue(machine.isOpen, "our EOF alone does not close a session channel")
        machine.passEnded(serverEOF: true, progressed: false, delivered: true)
        XCTAssertEqual(machine.phase, .closing)
        XCTAssertEqual(machine.reason, .outputEnded)
        XCTAssertEqual(handshake(&machine, serverEOF: true), [.releaseLocal, .sendClose, .awaitServerClose, .free])
        XCTAssertEqual(machine.phase, .freed)
    }

    func testTheServersEOFCountsOnlyOnceEverythingItSentIsDeliveredAndNothingMoved() {
        var machine = Machine(.session(hangup: nil))
        machine.passEnded(serverEOF: true, progressed: true, delivered: true)
        XCTAssertTrue(machine.isOpen, "bytes moved in this pass: libssh2 may hold more")
        machine.passEnded(serverEOF: true, progressed: false, delivered: false)
        XCTAssertTrue(machine.isOpen, "output still waits for the consumer or a descriptor")
        machine.passEnded(serverEOF: false, progressed: false, delivered: true)
        XCTAssertTrue(machine.isOpen)
        machine.passEnded(serverEOF: true, progressed: false, delivered: true)
        XCTAssertEqual(machine.reason, .outputEnded)
        XCTAssertTrue(machine.eofReceived)
    }

    func testClosingFirstHangsUpTheRemoteCommandOnceThenClosesAndRetriesEachStepAfterEAGAIN() {
        var machine = Machine(.session(hangup: "HUP"))
        machine.closeRequested()
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .releaseLocal)
        machine.completed(.releaseLocal, .done)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendSignal("HUP"))
        machine.completed(.sendSignal("HUP"), .again)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendSignal("HUP"), "the same call after EAGAIN")
        machine.completed(.sendSignal("HUP"), .done)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendClose)
        machine.completed(.sendClose, .again)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendClose)
        machine.completed(.sendClose, .done)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .awaitServerClose)
        machine.completed(.awaitServerClose, .again)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .awaitServerClose)
        machine.completed(.awaitServerClose, .done)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .free)
        machine.completed(.free, .again)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .free)
        machine.completed(.free, .done)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .none)
        XCTAssertEqual(machine.phase, .freed)
    }

    func testTheSignalAskedForWinsOverTheDefaultHangUpAndTheFirstRequestKeepsIt() {
        var machine = Machine(.session(hangup: "TERM"))
        machine.closeRequested(signal: "INT")
        machine.closeRequested(signal: "KILL")
        XCTAssertEqual(handshake(&machine), [.releaseLocal, .sendSignal("INT"), .sendClose, .awaitServerClose, .free])
    }

    func testNoSignalGoesToACommandThatHasEndedOrToASubsystem() {
        var ended = Machine(.session(hangup: "TERM"))
        ended.closeRequested(signal: "INT")
        XCTAssertEqual(handshake(&ended, serverEOF: true), [.releaseLocal, .sendClose, .awaitServerClose, .free],
                       "the server's EOF came: the command is done")
        var subsystem = Machine(.session(hangup: nil))
        subsystem.closeRequested()
        XCTAssertEqual(handshake(&subsystem), [.releaseLocal, .sendClose, .awaitServerClose, .free])
    }

    func testARefusedSignalStillClosesAndARefusedCloseStillWaitsForTheServer() {
        var machine = Machine(.session(hangup: "TERM"))
        machine.closeRequested()
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .releaseLocal)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendSignal("TERM"))
        machine.completed(.sendSignal("TERM"), .refused)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendClose)
        machine.completed(.sendClose, .refused)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .awaitServerClose)
    }

    func testRequestsQueuedOnTheLaneHoldTheHandshakeButNotTheRelease() {
        var machine = Machine(.session(hangup: "TERM"))
        machine.closeRequested()
        XCTAssertEqual(machine.nextAction(lanePending: true, serverEOF: false), .releaseLocal, "descriptors go at once")
        XCTAssertEqual(machine.nextAction(lanePending: true, serverEOF: false), .waitForLane)
        XCTAssertEqual(machine.nextAction(lanePending: true, serverEOF: false), .waitForLane)
        XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .sendSignal("TERM"))
    }

    func testARefusedReadOrWriteClosesAndNoEOFGoesOutAfterIt() {
        var machine = Machine(.session(hangup: "TERM"))
        machine.refused()
        XCTAssertEqual(machine.reason, .refused)
        XCTAssertFalse(machine.wantsToSendEOF(inputDone: true))
        machine.passEnded(serverEOF: true, progressed: false, delivered: true)
        XCTAssertEqual(machine.reason, .refused, "the first reason stays")
        XCTAssertFalse(machine.eofReceived)
    }

    func testALocalOutputThatFailedClosesTheChannel() {
        var machine = Machine(.session(hangup: "TERM"))
        machine.localOutputFailed()
        XCTAssertEqual(machine.phase, .closing)
        XCTAssertEqual(machine.reason, .localOutputFailed)
    }

    func testEOFSendingRetriesAfterEAGAINAndARefusalCountsAsSent() {
        var machine = Machine(.session(hangup: nil))
        XCTAssertFalse(machine.wantsToSendEOF(inputDone: false), "input still to send")
        machine.eofSending(.again)
        XCTAssertTrue(machine.wantsToSendEOF(inputDone: true))
        machine.eofSending(.refused)
        XCTAssertTrue(machine.eofSent)
        XCTAssertFalse(machine.wantsToSendEOF(inputDone: true))
    }

    func testASessionLostAnywhereEndsEverythingAndNothingMoreIsDone() {
        for step in 0..<4 {
            var machine = Machine(.session(hangup: "TERM"))
            machine.closeRequested()
            for _ in 0..<step {
                let action = machine.nextAction(lanePending: false, serverEOF: false)
                machine.completed(action, .done)
            }
            machine.sessionLost()
            XCTAssertEqual(machine.phase, .lost)
            XCTAssertEqual(machine.nextAction(lanePending: false, serverEOF: false), .none, "after \(step) steps")
        }
        var closing = Machine(.session(hangup: nil))
        closing.closeRequested()
        XCTAssertEqual(closing.nextAction(lanePending: false, serverEOF: false), .releaseLocal)
        XCTAssertEqual(closing.nextAction(lanePending: false, serverEOF: false), .sendClose)
        closing.completed(.sendClose, .sessionLost)
        XCTAssertEqual(closing.phase, .lost, "a close that finds the session dead")
        var eof = Machine(.session(hangup: nil))
        eof.eofSending(.sessionLost)
        XCTAssertEqual(eof.phase, .lost)
    }

    func testAFreedChannelStaysFreedWhateverComesLater() {
        var machine = Machine(.session(hangup: nil))
        machine.closeRequested()
        _ = handshake(&machine)
        machine.sessionLost()
        machine.refused()
        machine.closeRequested(signal: "INT")
        XCTAssertEqual(machine.phase, .freed)
    }

    func testABridgeKeepsEachDirectionUntilBothEndedThenClosesWithoutWaitingForTheServer() {
        // The local side ends first: EOF goes to the server; the server's EOF later closes.
        var localFirst = Machine(.bridge)
        localFirst.eofSending(.done)
        XCTAssertTrue(localFirst.isOpen, "the server may still send")
        XCTAssertTrue(localFirst.outputEnded(), "the first EOF from the server shuts the local writing")
        XCTAssertFalse(localFirst.outputEnded(), "only once")
        XCTAssertEqual(localFirst.reason, .bothEnded)
        XCTAssertEqual(handshake(&localFirst), [.releaseLocal, .sendClose, .free])

        // The server ends first: the local side may still send; its EOF closes.
        var serverFirst = Machine(.bridge)
        XCTAssertTrue(serverFirst.outputEnded())
        XCTAssertTrue(serverFirst.isOpen, "a half-closed stream still carries the other way")
        XCTAssertTrue(serverFirst.wantsToSendEOF(inputDone: true))
        serverFirst.eofSending(.done)
        XCTAssertEqual(serverFirst.reason, .bothEnded)
    }

    func testABridgeWhoseLocalPeerWentAwayClosesAtOnce() {
        var machine = Machine(.bridge)
        XCTAssertTrue(machine.outputEnded())
        machine.localOutputFailed()
        XCTAssertEqual(machine.reason, .localOutputFailed)
        XCTAssertFalse(machine.wantsToSendEOF(inputDone: true))
        XCTAssertEqual(handshake(&machine), [.releaseLocal, .sendClose, .free])
    }

    func testOutcomesAreReadFromReturnCodes() {
        let eagain: Int32 = -37
        let fatal: (Int32) -> Bool = { $0 == -13 }
        XCTAssertEqual(Machine.Outcome.of(0, eagain: eagain, isFatal: fatal), .done)
        XCTAssertEqual(Machine.Outcome.of(-37, eagain: eagain, isFatal: fatal), .again)
        XCTAssertEqual(Machine.Outcome.of(-13, eagain: eagain, isFatal: fatal), .sessionLost)
        XCTAssertEqual(Machine.Outcome.of(-34, eagain: eagain, isFatal: fatal), .refused)
    }
}
