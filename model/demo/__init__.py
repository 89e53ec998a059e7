"""The embedded demo model: English number words → German, French, Spanish or Italian number words."""
