//go:build idem_mutant

package engine

// MutantReleaseAfterAnswer, in a build with the idem_mutant tag only,
// restores a defect for the robustness harness (integration/robustness) to
// catch: work whose lease was lost, or that Shutdown cut off, is released
// even when its adapter saw a whole answer to record, so the retry runs its
// side effect again. It does not exist in any other build.
var MutantReleaseAfterAnswer bool

func mutantReleaseAfterAnswer() bool { return MutantReleaseAfterAnswer }
