"""Retraining the forecasters on long workload histories, on Spark.

Only `job.py` imports pyspark. The rest (`seasonal_profile.py`, `models.py`, `train.py`) is plain numpy/pandas/
pmdarima/statsmodels, so the daemon can load the models this package produces without Spark installed.
"""
