"""ember.frontend stage."""
