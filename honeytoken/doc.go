// Package honeytoken makes canary credentials and finds them in traffic.
//
// egressd run (or `egressd honeytokens issue` for containers and pods)
// places a set of credentials in a sandbox that look real — an AWS key pair
// in AWS's own format, a GitHub-style token, a generic API key — and grant
// nothing: each is random, registered nowhere, and built so that it can
// never be valid (see Issue). Nothing legitimate ever sends them, so any of
// them on the way out is an exfiltration attempt: the proxy and the DNS
// filter ask a Registry whether a URL, header, decoded body, DNS name or SNI
// holds one, refuse it whatever the rule says, and raise an alert.
//
// The scan is one pass over the bytes with ASCII case folded (DNS names
// reach egressd lower-cased): a rolling 8-byte window is looked up in a
// small bit filter, and only a window whose bit is set is looked up in the
// exact set and compared whole.
package honeytoken
