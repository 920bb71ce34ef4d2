// Package pgstore is the PostgreSQL [idem.Store]: durable claims that
// survive crashes and restarts of any number of service instances.
package pgstore
