// Package classify reads what an HTTP request does, without sockets or
// policy: ClassifyPage names its page type (read, download, login, oauth,
// upload, publish, posting, admin, payment) and the signal that decided it,
// and CheckMirror holds it against a package ecosystem's download grammar.
//
// Each ecosystem lives in one file (eco_<name>.go) that registers its
// download grammar, its known writes (the publish, upload and token
// endpoints ClassifyPage must never call reads) and its publish probe (the
// request the self-test sends to prove a mirror rule refuses publishing).
// Adding an ecosystem is adding that file; TestEcosystemsDeclareAll fails
// if one of the three is missing or does not do its job.
//
// Page types are split by concern: the decision (pagetype.go: ClassifyPage,
// the read-only POST shapes, known writes and downloads), the words and
// tables it reads (pagetype_tables.go), path parsing and the signals its
// segments carry (pagetype_path.go), and query scanning
// (pagetype_query.go). Decoding helpers shared by both classifiers are in
// decode.go. The policy
// package re-exports the types, so callers need not import this one.
package classify
