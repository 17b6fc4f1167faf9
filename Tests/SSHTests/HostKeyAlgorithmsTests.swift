import TermindSSH
import XCTest

/// The host-key algorithm order, as OpenSSH's order_hostkeyalgs makes it.
final class HostKeyAlgorithmsTests: XCTestCase {
    func testWithNothingKnownTheOrderIsOpenSSHsDefaultWithoutCertificatesOrSHA1() {
        XCTAssertEqual(HostKeyAlgorithms.preference(knownKeyTypes: []),
                       ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256"])
    }

    func testKnownTypesComeFirstInDefaultOrderAndRSAKeysMeanBothSHA2Signatures() {
        XCTAssertEqual(HostKeyAlgorithms.preference(knownKeyTypes: ["ssh-rsa", "ecdsa-sha2-nistp384"]),
                       ["ecdsa-sha2-nistp384", "rsa-sha2-512", "rsa-sha2-256", "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp521"])
        XCTAssertEqual(HostKeyAlgorithms.preference(knownKeyTypes: ["ecdsa-sha2-nistp256"]).first, "ecdsa-sha2-nistp256")
    }

    func testUnsupportedAlgorithmsAreLeftOut() {
        XCTAssertEqual(HostKeyAlgorithms.preference(knownKeyTypes: ["ssh-rsa"], supported: ["ssh-ed25519", "rsa-sha2-256", "ssh-dss"]),
                       ["rsa-sha2-256", "ssh-ed25519"])
    }
}
