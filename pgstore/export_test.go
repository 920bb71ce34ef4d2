package pgstore

// SetWaitBlocked installs a hook called when Wait has seen a live claim and
// blocks: from then on only a notification, the lease end, the poll
// interval or ctx can end the wait.
func SetWaitBlocked(s *Store, f func()) { s.waitBlocked = f }

// ChannelSQL is the SQL expression of the store's LISTEN channel.
func ChannelSQL(s *Store) string { return s.sql.channel }

// PayloadSQL is the SQL expression of a row's NOTIFY payload, over columns
// scope and key.
const PayloadSQL = payloadSQL

// NotifyPayload is the Go side of PayloadSQL.
var NotifyPayload = notifyPayload
