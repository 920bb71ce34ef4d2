package idemcall_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }
