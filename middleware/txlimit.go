package middleware

import (
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

// transactionLimit answers 500 [TypeTransactionLimit]: PostgreSQL ended the
// request's transaction at the bound le, so nothing of it took effect, and
// a retry meets the same bound unless the handler is faster or the setting
// is raised. The answer says which, and does not ask for a retry (no
// Retry-After): a client told "retry" would fail the same way each time.
func transactionLimit(w http.ResponseWriter, le *idem.TxLimitError) {
	writeProblem(w, problem{Type: TypeTransactionLimit, Status: http.StatusInternalServerError,
		Detail: "The database ended this request's transaction, so nothing of it took effect: " + engine.ExplainTxLimit(le) +
			". A retry runs the request again and ends the same way if it takes as long."}, "")
}
