"""ember.inductor stage."""
