package testhosts

import "testing"

// The three tiers of tests: pure (data in, data out), the real kernel (as
// root, in throwaway namespaces), and end to end through the built binary.
// 'go test -short ./...' is the pure tier alone: the other two skip, saying
// which tier they are. A -short run chooses the tier; it is not a missing
// capability, so POSTERN_REQUIRE_PRIVILEGED does not turn it into a failure.

// Kernel skips t under -short: it needs the real kernel (namespaces,
// nftables, root).
func Kernel(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel tier: skipped under -short")
	}
}

// EndToEnd skips t under -short: it runs the built binary against real
// servers in test hosts.
func EndToEnd(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tier: skipped under -short")
	}
}
