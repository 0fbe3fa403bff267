// Package archtest holds repository-wide tests: the dependency rules
// between our packages (the allowed table in arch_test.go: every package
// must be listed there, with the packages of ours it may import), that no
// production code imports the test helpers, and one package doc comment per
// package. It reads the source with go/parser: no go command, no network.
package archtest
