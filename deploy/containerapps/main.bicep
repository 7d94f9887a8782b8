// tablekeeper on Azure Container Apps: an event-driven job that runs the worker
// with -drain whenever the work queue holds messages (KEDA azure-queue rule,
// authenticated by a user-assigned managed identity), a scheduled job that
// enqueues the daily purgeday, and the scheduled backups (a weekly full
// export, a nightly increment, a daily prune). Deploy into the resource group of the storage
// account (see docs/deploy.md, "Azure Container Apps"):
//
//   az deployment group create -g RG -f deploy/containerapps/main.bicep -p deploy/containerapps/main.bicepparam
//
// API versions: Microsoft.App/jobs and managedEnvironments at 2026-01-01, the
// newest stable version in azure-rest-api-specs
// (specification/app/resource-manager/Microsoft.App/ContainerApps/stable/2026-01-01/Jobs.json).
// A scale rule's `identity` (managed identity for KEDA instead of a connection
// string secret) is not in 2024-03-01; it is in the stable versions since
// 2025-01-01 (examples/Job_CreateorUpdate_EventTrigger.json).
//
// Least privilege: two identities. The worker's has the three data roles it
// needs (queues, tables, blobs) on this one storage account and nothing else;
// the scheduler's may only add messages to the one work queue (Storage Queue
// Data Message Sender scoped to the queue) and read the backup container
// (Storage Blob Data Reader scoped to it: `enqueue export` checks that the
// container exists before it sends): `enqueue purgeday` without -dry-run and
// `enqueue export` only send, and the queue exists because this template
// creates it, so it never needs create or list rights. The prune deletes
// blobs itself, so it runs as the worker's identity.

@description('Azure region of the jobs, the identities and the environment. Default: the resource group\'s.')
param location string = resourceGroup().location

@description('Prefix of every resource name this template creates (jobs, identities, environment).')
@minLength(2)
@maxLength(20)
param namePrefix string = 'tablekeeper'

@description('The existing storage account (in this resource group) whose queues, tables and blobs tablekeeper works on.')
param storageAccountName string

@description('The work queue (3-63 lower-case letters, digits and single hyphens). The template creates it; the worker creates <queue>-poison itself.')
@minLength(3)
@maxLength(63)
param queueName string = 'tablekeeper'

@description('The tablekeeper image, such as myregistry.azurecr.io/tablekeeper:v1.2.3 (make image, or az acr build -f deploy/Dockerfile).')
param image string

@description('Name of an Azure Container Registry in this resource group to pull the image from with the jobs\' identities (AcrPull is assigned). Empty: the image is public.')
param registryName string = ''

@description('true: create the Container Apps environment environmentName with a Log Analytics workspace for its logs; false: use the existing environment of that name in this resource group.')
param createEnvironment bool = true

@description('Name of the Container Apps environment (created or existing, see createEnvironment).')
param environmentName string = '${namePrefix}-env'

@description('Workload profile the jobs run on: Consumption in an environment with workload profiles (the default for new ones); empty for a consumption-only environment.')
param workloadProfileName string = 'Consumption'

@description('KEDA azure-queue queueLength: the messages one execution is expected to take; keep it equal to the worker\'s -concurrency (default 16), or executions start that find nothing visible and idle out -drain-quiet. The rule starts ceil(messages / queueLength) executions, at most maxExecutions running at once.')
@minValue(1)
param queueLength int = 16

@description('KEDA azure-queue queueLengthStrategy: visibleonly counts only visible messages (Peek, up to 32, else all), so messages in flight or waiting out a retry backoff start no execution that would find nothing; all counts every message. Older KEDA ignores it (= all).')
@allowed([
  'visibleonly'
  'all'
])
param queueLengthStrategy string = 'visibleonly'

@description('Seconds between two looks at the queue length (KEDA pollingInterval). Lower starts work sooner and costs more storage calls (1 to 32 per look).')
@minValue(10)
param pollingInterval int = 30

@description('Most executions of the worker job running at once (eventTriggerConfig.scale.maxExecutions).')
@minValue(1)
param maxExecutions int = 10

@description('Replicas each execution starts (eventTriggerConfig.parallelism); each runs one worker process.')
@minValue(1)
param parallelism int = 1

@description('Seconds an execution of the worker may run before Container Apps stops it (replicaTimeout). The worker is given -max-duration 60 s shorter, so it stops taking messages, finishes or releases its jobs and exits 0 first.')
@minValue(180)
param replicaTimeout int = 1800

@description('How often a failed replica (exit status 1: bad configuration or a storage outage) is retried within one execution (replicaRetryLimit).')
@minValue(0)
param replicaRetryLimit int = 1

@description('More worker flags after -drain -queue <queueName>, such as [\'-concurrency\', \'8\', \'-visibility\', \'2m\'] (see worker -h).')
param workerArgs array = []

@description('CPU cores of a worker replica, as a string (Consumption pairs: 0.25/0.5Gi, 0.5/1Gi, 1/2Gi, 2/4Gi …).')
param workerCpu string = '0.5'

@description('Memory of a worker replica, such as 1Gi (see workerCpu for the pairs).')
param workerMemory string = '1Gi'

@description('Day-table prefix the daily purge deletes from (enqueue purgeday -prefix), such as LoginAttempts. Empty: no scheduled purge job.')
param purgePrefix string = ''

@description('Days the daily purge keeps besides today (enqueue purgeday -keep-days, 1-36500).')
@minValue(1)
@maxValue(36500)
param purgeKeepDays int = 30

@description('When the purge is enqueued: a cron expression in UTC (scheduleTriggerConfig.cronExpression). Default 02:15 every day.')
param purgeSchedule string = '15 2 * * *'

@description('Table the scheduled backups export (enqueue export -table): a full export every week, an increment every other night, a daily prune (docs/deploy.md, "Scheduled backups"). Empty: no backup jobs.')
param backupTable string = ''

@description('Where the backups go: container/prefix (enqueue export -to). The container must exist.')
param backupTo string = ''

@description('When the weekly full export is enqueued: a cron expression in UTC. Default 01:30 on Sundays.')
param backupFullSchedule string = '30 1 * * 0'

@description('When the nightly increment (enqueue export -after-latest) is enqueued: a cron expression in UTC. Default 01:30 Monday to Saturday.')
param backupIncrementSchedule string = '30 1 * * 1-6'

@description('When exports older than backupKeepDays are pruned (enqueue export prune -yes, as the worker\'s identity): a cron expression in UTC. Default 05:00 every day.')
param backupPruneSchedule string = '0 5 * * *'

@description('Days of exports the prune keeps (enqueue export prune -keep-days). Keep more than a week, so that a full export and its chain always remain.')
@minValue(1)
@maxValue(36500)
param backupKeepDays int = 35

// Built-in role definitions (IDs from the Azure built-in roles reference,
// Storage category).
var roles = {
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  storageQueueDataMessageSender: 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
  storageBlobDataReader: '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'
  acrPull: '7f951dda-4ed3-4680-a7ca-43fe172d538d'
}
var workerRoleIds = [
  roles.storageQueueDataContributor
  roles.storageTableDataContributor
  roles.storageBlobDataContributor
]
var registryServer = empty(registryName) ? '' : '${registryName}${environment().suffixes.acrLoginServer}'
var profile = empty(workloadProfileName) ? null : workloadProfileName
// The scheduler's identity exists when something is scheduled.
var scheduled = !empty(purgePrefix) || !empty(backupTable)
var backups = !empty(backupTable)
// A placeholder when there is no backup: see registryRef.
var backupContainerName = empty(backupTo) ? 'none' : split(backupTo, '/')[0]
// The backup jobs: the exports only send (the scheduler's identity); the
// prune deletes blobs (the worker's).
var backupJobs = [
  {
    name: 'backup-weekly'
    cron: backupFullSchedule
    worker: false
    args: [
      'export'
      '-queue'
      queueName
      '-table'
      backupTable
      '-to'
      backupTo
      '-gzip'
    ]
  }
  {
    name: 'backup-nightly'
    cron: backupIncrementSchedule
    worker: false
    args: [
      'export'
      '-queue'
      queueName
      '-table'
      backupTable
      '-to'
      backupTo
      '-after-latest'
      '-gzip'
    ]
  }
  {
    name: 'backup-prune'
    cron: backupPruneSchedule
    worker: true
    args: [
      'export'
      'prune'
      '-to'
      backupTo
      '-keep-days'
      string(backupKeepDays)
      '-yes'
    ]
  }
]

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

// The work queue exists before the first scale check and the first scheduled
// send (the scheduler's identity may not create it).
resource workQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: queueName
}

resource workerIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: '${namePrefix}-worker'
  location: location
}

resource schedulerIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = if (scheduled) {
  name: '${namePrefix}-scheduler'
  location: location
}

// The worker: queues (receive, delete, update, poison queue), tables (jobs,
// checkpoints, failure records) and blobs (exports, argsRef), on this account only.
resource workerRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in workerRoleIds: {
  name: guid(storageAccount.id, workerIdentity.id, roleId)
  scope: storageAccount
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: workerIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}]

// The scheduler: add messages to the work queue, nothing else.
resource schedulerSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (scheduled) {
  name: guid(workQueue.id, '${namePrefix}-scheduler', roles.storageQueueDataMessageSender)
  scope: workQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataMessageSender)
    principalId: schedulerIdentity!.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource backupContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = if (backups) {
  parent: blobService
  name: backupContainerName
}

// The scheduler reads the backup container: enqueue export checks it exists.
resource schedulerBackupReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (backups) {
  name: guid(storageAccount.id, backupContainerName, '${namePrefix}-scheduler', roles.storageBlobDataReader)
  scope: backupContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataReader)
    principalId: schedulerIdentity!.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

// ARM checks the scope of a conditional resource even when its condition is
// false (Azure/bicep#1492): an empty name would make the scope
// ".../registries/" and fail preflight, so the unused branch gets a
// placeholder name.
var registryRef = empty(registryName) ? 'none' : registryName

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' existing = if (!empty(registryName)) {
  name: registryRef
}

resource workerAcrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(registryName)) {
  name: guid(resourceId('Microsoft.ContainerRegistry/registries', registryRef), workerIdentity.id, roles.acrPull)
  scope: registry
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.acrPull)
    principalId: workerIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource schedulerAcrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(registryName) && scheduled) {
  name: guid(resourceId('Microsoft.ContainerRegistry/registries', registryRef), '${namePrefix}-scheduler', roles.acrPull)
  scope: registry
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.acrPull)
    principalId: schedulerIdentity!.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource logs 'Microsoft.OperationalInsights/workspaces@2023-09-01' = if (createEnvironment) {
  name: '${namePrefix}-logs'
  location: location
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: 30
  }
}

resource newEnvironment 'Microsoft.App/managedEnvironments@2026-01-01' = if (createEnvironment) {
  name: environmentName
  location: location
  properties: {
    appLogsConfiguration: {
      destination: 'log-analytics'
      logAnalyticsConfiguration: {
        customerId: logs!.properties.customerId
        sharedKey: logs!.listKeys().primarySharedKey
      }
    }
    workloadProfiles: [
      {
        name: 'Consumption'
        workloadProfileType: 'Consumption'
      }
    ]
  }
}

resource existingEnvironment 'Microsoft.App/managedEnvironments@2026-01-01' existing = if (!createEnvironment) {
  name: environmentName
}

var environmentId = createEnvironment ? newEnvironment.id : existingEnvironment.id

// The worker job: KEDA polls the queue every pollingInterval seconds and starts
// executions for its messages; each runs `worker -drain`, which exits 0 once
// nothing is visible and nothing runs (see docs/cli.md, "Draining").
resource workerJob 'Microsoft.App/jobs@2026-01-01' = {
  name: '${namePrefix}-worker'
  location: location
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${workerIdentity.id}': {}
    }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: profile
    configuration: {
      triggerType: 'Event'
      replicaTimeout: replicaTimeout
      replicaRetryLimit: replicaRetryLimit
      eventTriggerConfig: {
        parallelism: parallelism
        replicaCompletionCount: parallelism
        scale: {
          minExecutions: 0
          maxExecutions: maxExecutions
          pollingInterval: pollingInterval
          rules: [
            {
              name: 'work-queue'
              type: 'azure-queue'
              metadata: {
                accountName: storageAccountName
                queueName: queueName
                queueLength: string(queueLength)
                queueLengthStrategy: queueLengthStrategy
              }
              // KEDA authenticates as the worker's identity (no connection string secret).
              identity: workerIdentity.id
            }
          ]
        }
      }
      registries: empty(registryName) ? [] : [
        {
          server: registryServer
          identity: workerIdentity.id
        }
      ]
    }
    template: {
      containers: [
        {
          name: 'worker'
          image: image
          // The image's ENTRYPOINT is /worker.
          args: concat([
            '-drain'
            '-queue'
            queueName
            '-max-duration'
            '${replicaTimeout - 60}s'
          ], workerArgs)
          env: [
            {
              name: 'AZURE_STORAGE_ACCOUNT'
              value: storageAccountName
            }
            {
              // DefaultAzureCredential picks this user-assigned identity.
              name: 'AZURE_CLIENT_ID'
              value: workerIdentity.properties.clientId
            }
          ]
          resources: {
            cpu: json(workerCpu)
            memory: workerMemory
          }
        }
      ]
    }
  }
  dependsOn: [
    workerRoles
    workerAcrPull
  ]
}

// The daily purge: one `enqueue purgeday` message; the worker job runs it.
// A retried replica may send a second message: purgeday is idempotent (the
// second finds the expired days gone).
resource schedulerJob 'Microsoft.App/jobs@2026-01-01' = if (!empty(purgePrefix)) {
  name: '${namePrefix}-purgeday'
  location: location
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${schedulerIdentity.id}': {}
    }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: profile
    configuration: {
      triggerType: 'Schedule'
      replicaTimeout: 300
      replicaRetryLimit: 2
      scheduleTriggerConfig: {
        cronExpression: purgeSchedule
        parallelism: 1
        replicaCompletionCount: 1
      }
      registries: empty(registryName) ? [] : [
        {
          server: registryServer
          identity: schedulerIdentity.id
        }
      ]
    }
    template: {
      containers: [
        {
          name: 'purgeday'
          image: image
          command: [
            '/enqueue'
          ]
          args: [
            'purgeday'
            '-queue'
            queueName
            '-prefix'
            purgePrefix
            '-keep-days'
            string(purgeKeepDays)
          ]
          env: [
            {
              name: 'AZURE_STORAGE_ACCOUNT'
              value: storageAccountName
            }
            {
              name: 'AZURE_CLIENT_ID'
              value: schedulerIdentity!.properties.clientId
            }
          ]
          resources: {
            cpu: json('0.25')
            memory: '0.5Gi'
          }
        }
      ]
    }
  }
  dependsOn: [
    schedulerSender
    schedulerAcrPull
  ]
}

// The scheduled backups (docs/deploy.md, "Scheduled backups"): two export
// jobs that only send, and the prune. A retried replica may send a second
// export (another operation id: the same rows exported twice, which the
// prune later deletes like any other); the prune is idempotent.
resource backupJob 'Microsoft.App/jobs@2026-01-01' = [for j in backupJobs: if (backups) {
  name: '${namePrefix}-${j.name}'
  location: location
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${j.worker ? workerIdentity.id : schedulerIdentity!.id}': {}
    }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: profile
    configuration: {
      triggerType: 'Schedule'
      replicaTimeout: 1800
      replicaRetryLimit: 1
      scheduleTriggerConfig: {
        cronExpression: j.cron
        parallelism: 1
        replicaCompletionCount: 1
      }
      registries: empty(registryName) ? [] : [
        {
          server: registryServer
          identity: j.worker ? workerIdentity.id : schedulerIdentity!.id
        }
      ]
    }
    template: {
      containers: [
        {
          name: j.name
          image: image
          command: [
            '/enqueue'
          ]
          args: j.args
          env: [
            {
              name: 'AZURE_STORAGE_ACCOUNT'
              value: storageAccountName
            }
            {
              name: 'AZURE_CLIENT_ID'
              value: j.worker ? workerIdentity.properties.clientId : schedulerIdentity!.properties.clientId
            }
          ]
          resources: {
            cpu: json('0.25')
            memory: '0.5Gi'
          }
        }
      ]
    }
  }
  dependsOn: [
    workerRoles
    workerAcrPull
    schedulerSender
    schedulerBackupReader
    schedulerAcrPull
  ]
}]

@description('Name of the event-driven worker job (az containerapp job execution list -n …).')
output workerJobName string = workerJob.name

@description('Name of the scheduled purge job; empty when purgePrefix is empty.')
output purgeJobName string = empty(purgePrefix) ? '' : schedulerJob.name

@description('Client id of the worker\'s identity (its AZURE_CLIENT_ID).')
output workerClientId string = workerIdentity.properties.clientId

@description('Resource id of the Container Apps environment the jobs run in.')
output environmentId string = environmentId
