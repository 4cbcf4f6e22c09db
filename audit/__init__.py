"""MLPerf compliance (audit) tests: their audit.config files and the checks that judge them."""
