package migrations

// UpTo applies the migrations up to version (an installation of an older
// release, for upgrade tests).
var UpTo = upTo
