// Package archtest holds repository-wide tests: the dependency direction of
// DESIGN.md (policy imports nothing of ours; proxy and dnsfilter only
// policy; nft nothing; selftest only the namespace plumbing) and one
// package doc comment per package.
package archtest
