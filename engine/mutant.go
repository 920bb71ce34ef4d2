//go:build !idem_mutant

package engine

// mutantReleaseAfterAnswer is false: production builds have no broken
// variants, and the compiler drops the branch it guards.
func mutantReleaseAfterAnswer() bool { return false }
