"""FAKE stand-in for DCGM's DcgmReader.py: the real constructor signature, SetHandle, Shutdown and
GetLatestEntityValuesAsFieldIdDict -> {entityGroupId: {entityId: {fieldId: value}}}, with blank
values dropped (ignoreBlank=True) and {} when the hostengine connection is lost (the real reader
catches DCGM_ST_CONNECTION_NOT_VALID and returns its empty dict)."""

import _fake_state
import dcgmvalue


class DcgmReader:
    def __init__(self, hostname="localhost", fieldIds=None, updateFrequency=10000000, maxKeepAge=3600.0,
                 ignoreList=None, fieldGroupName="dcgm_fieldgroupData", gpuIds=None, entities=None,
                 fieldIntervalMap=None, ignoreBlank=True):
        self.m_publishFields = {updateFrequency: list(fieldIds or [])}
        self.m_requestedEntities = entities
        self.m_ignoreBlank = ignoreBlank
        self.m_dcgmHandle = None

    def SetHandle(self, handle):
        self.m_dcgmHandle = handle

    def Shutdown(self):
        self.m_dcgmHandle = None

    def GetLatestEntityValuesAsFieldIdDict(self):
        scenario = _fake_state.get()
        if scenario.get("hostengine_down"):
            return {}
        fields = {f for ids in self.m_publishFields.values() for f in ids}
        out = {}
        for pair in self.m_requestedEntities or []:
            raw = scenario["values"].get(str(pair.entityGroupId), {}).get(str(pair.entityId))
            if raw is None:
                continue
            values = {int(f): v for f, v in raw.items() if int(f) in fields and not (self.m_ignoreBlank and _blank(v))}
            out.setdefault(pair.entityGroupId, {})[pair.entityId] = values
        return out


def _blank(v):
    if isinstance(v, str):
        return dcgmvalue.DCGM_STR_IS_BLANK(v)
    if isinstance(v, float):
        return dcgmvalue.DCGM_FP64_IS_BLANK(v)
    return dcgmvalue.DCGM_INT64_IS_BLANK(v)
