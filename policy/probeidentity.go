package policy

import "strings"

// Probe traffic is not agent traffic: egressd's own self-test and the
// in-sandbox probes are logged under these identities, so metrics, alerts
// and the evidence pack can tell them from agents.
const (
	// SelftestIdentity labels egressd's own self-test.
	SelftestIdentity = "egressd-selftest"
	// ProbeIdentityPrefix labels an in-sandbox probe run:
	// "egressd-probe/agent-a".
	ProbeIdentityPrefix = "egressd-probe/"
)

// IsProbeIdentity reports whether a logged identity is probe traffic.
func IsProbeIdentity(id string) bool {
	return id == SelftestIdentity || strings.HasPrefix(id, ProbeIdentityPrefix)
}

// CanaryToken in selftest.canary_name or canary_url stands for each
// identity's canary token (selftest/plan.CanaryToken).
const CanaryToken = "{token}"
