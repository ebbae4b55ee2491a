"""Which device runs a binary. In: the fleet file (or one device per board) and each run's
errors. Out: a leased device with an open transport, strikes, quarantine and retries."""
