"""``pikku-mongo doctor``: does this deployment give the store the guarantees it relies
on? ``await diagnose(store)`` returns a :class:`DoctorReport` of :class:`Check` lines
(see :mod:`pikku_mongo.doctor.diagnosis`); ``render(report)`` is its table."""

from pikku_mongo.doctor.diagnosis import diagnose
from pikku_mongo.doctor.report import Check, DoctorReport, render

__all__ = ["Check", "DoctorReport", "diagnose", "render"]
