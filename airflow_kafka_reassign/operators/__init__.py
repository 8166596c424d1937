"""Airflow operators: thin shells that build a hook, call the pure core and push small XCom JSON."""
