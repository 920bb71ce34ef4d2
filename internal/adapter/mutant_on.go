//go:build idem_mutant

package adapter

// MutantHeldStatusEscapes, in a build with the idem_mutant tag only,
// restores a defect for the robustness harness (integration/robustness) to
// catch: while an answer is held until its commit, a second status the
// handler writes passes straight to the client, with the headers set so
// far, so a client may be told it succeeded before a commit that then
// fails. It does not exist in any other build.
var MutantHeldStatusEscapes bool

func mutantHeldStatusEscapes() bool { return MutantHeldStatusEscapes }
