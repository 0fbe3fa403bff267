package nft

// A trial puts a candidate's walls on one interface only (the self-test's
// probe link) while the walls in force keep judging every other sandbox:
// the candidate is rendered as a table of its own (TrialTable) whose base
// chains match that interface by its exact name, and the table in force
// gets a rule at the head of each classifying base chain (input, forward,
// prerouting) that accepts that interface's packets without judging them.
// An accept ends only its own chain, so the trial table still judges them,
// and a drop there is final; the nat chain in force makes no mapping for
// them, so the trial table's redirects apply. TryOn installs a trial, EndTry
// removes it and leaves the table in force as it was (counters and the
// redirect set untouched), Settle replaces the table in force and removes
// any trial: each one transaction.

// trialSuffix names a table's trial table.
const trialSuffix = "_try"

// skipTag is the user data that marks the rules TryOn adds to the table in
// force, so that EndTry removes those and nothing else.
const skipTag = "egressd:probe-path-trial"

// TrialTable is the name of the table TryOn installs beside table.
func TrialTable(table string) string {
	if table == "" {
		table = DefaultTable
	}
	return table + trialSuffix
}
