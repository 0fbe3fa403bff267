package policy

// Warnings lists what is valid in p but weakens the self-test's proof;
// egressd validate prints them (exit 0).
func (p *Policy) Warnings() []string {
	var w []string
	if len(p.Selftest.ExpectReachable) == 0 {
		w = append(w, "selftest.expect_reachable is empty: no positive control, so a self-test that reaches nothing at all (a broken proxy or network) looks sealed; add a URL egressd should let through")
	}
	if p.Selftest.CanaryName == "" && p.Selftest.CanaryURL == "" {
		w = append(w, "selftest has no canary_name or canary_url: nothing checks that an unlisted name and URL are refused; add one that no rule allows")
	}
	return w
}
