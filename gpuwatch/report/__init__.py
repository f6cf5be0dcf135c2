"""Weekly chargeback reports: self-contained HTML (fleet + one per team) and chargeback.csv."""
