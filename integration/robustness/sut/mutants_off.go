//go:build !idem_mutant

package main

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
)

// Without the idem_mutant tag there are no broken variants: the service is
// idem as it ships.

func enableMutant(name string) error {
	if name != "" {
		return errNoMutants
	}
	return nil
}

func wrapMutant(_ string, pg *pgstore.Store) idem.Store { return pg }
