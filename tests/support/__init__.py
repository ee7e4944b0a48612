"""What the project's tests share: harnesses, fake clocks, scenarios, schema checks (not tests themselves)."""
