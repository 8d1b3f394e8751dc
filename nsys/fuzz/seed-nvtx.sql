-- A small synthetic export with NVTX rows (the real fixtures have none), used as a fuzz seed.
PRAGMA page_size = 512;
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES (1,'k(int)'),(2,'k'),(3,'work'),(4,'main'),(5,'cudaMemset_v3020');
CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION','3.24.14'),
  ('EXPORT_PARAM_TIME_NORMALIZE','false'),('EXPORT_PARAM_TIME_SHIFT','0');
CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INTEGER, systemClockNs INTEGER);
INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, 5000000000);
CREATE TABLE ThreadNames(nameId INTEGER, priority INTEGER, globalTid INTEGER);
INSERT INTO ThreadNames VALUES (4, 10, 281546066874515);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER, end INTEGER, deviceId INTEGER,
  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER, gridX, gridY, gridZ, blockX, blockY, blockZ);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 2000, 0, 7, 11, 281546066870272, 1, 2, 2, 1, 1, 32, 1, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start, end, deviceId, streamId, globalPid, value, bytes, memKind);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (500, 600, 0, 7, 281546066870272, 0, 4096, 2);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, returnValue);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (400, 450, 0, 281546066874515, 10, 5, 0);
CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
  textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
  doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
  jsonTextId INTEGER, jsonText TEXT, binaryData BLOB);
INSERT INTO NVTX_EVENTS(start, eventType, domainId, text) VALUES (1, 75, 7, 'dom');
INSERT INTO NVTX_EVENTS(start, eventType, category, text) VALUES (2, 33, 3, 'IO');
INSERT INTO NVTX_EVENTS(start, end, eventType, category, color, text, globalTid, int64Value)
  VALUES (100, 200, 59, 3, 4278255360, 'step', 281546066874515, -5);
INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid, domainId, doubleValue)
  VALUES (150, 300, 60, 3, 281546066874515, 7, 2.5);
INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, jsonText) VALUES (410, 34, 'j', 281546066874515, '{"a":1}');
INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, binaryData) VALUES (430, 34, 'b', 281546066874515, X'0102');
