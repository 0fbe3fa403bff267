package selftest

import "context"

type probeLinkKey struct{}

// WithProbeLink returns ctx carrying tryOn for a run that builds a probe
// namespace wired like a sandbox: once the probe link is wired, and before
// any probe runs, the run calls tryOn with the name of the link's
// gateway-side interface (egressd puts a candidate's walls on that link
// alone, see daemon). An error from tryOn ends the run: nothing it would
// find could be trusted.
func WithProbeLink(ctx context.Context, tryOn func(iface string) error) context.Context {
	return context.WithValue(ctx, probeLinkKey{}, tryOn)
}

// ProbeLink returns the function WithProbeLink put in ctx, or nil.
func ProbeLink(ctx context.Context) func(iface string) error {
	f, _ := ctx.Value(probeLinkKey{}).(func(iface string) error)
	return f
}
