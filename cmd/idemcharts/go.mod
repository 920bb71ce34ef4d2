module github.com/idemkit/idem/cmd/idemcharts

go 1.26.0

require github.com/idemkit/idem v0.0.0-00010101000000-000000000000

replace github.com/idemkit/idem => ../..
