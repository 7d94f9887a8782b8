// Example parameters: copy, edit, then
//   az deployment group create -g RG -f deploy/containerapps/main.bicep -p deploy/containerapps/main.bicepparam
using './main.bicep'

param storageAccountName = 'tkstore12345'
param image = 'tkacr12345.azurecr.io/tablekeeper:v1.0.0'
param registryName = 'tkacr12345'
param queueName = 'tablekeeper'
param queueLength = 16
param maxExecutions = 10
param pollingInterval = 30
param replicaTimeout = 1800
param replicaRetryLimit = 1
param workerArgs = [
  '-concurrency'
  '16'
]
param purgePrefix = 'LoginAttempts'
param purgeKeepDays = 30
param purgeSchedule = '15 2 * * *'
param backupTable = 'Orders'
param backupTo = 'backups/orders'
param backupKeepDays = 35
