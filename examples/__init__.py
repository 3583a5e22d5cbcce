"""Example applications built on sqljobs; the tests run them as they are."""
